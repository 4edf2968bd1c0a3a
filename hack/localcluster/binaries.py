"""Where the pinned control-plane binaries live, building them on first use; and the one way
every ``hack/build-*.sh`` script is run."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

HACK_DIR = Path(__file__).resolve().parent.parent


def built(script: str) -> Path:
    """Run ``hack/<script>`` (it builds once into ~/.cache/grpo-operator; later runs are cache
    hits) and return the directory it prints last on stdout."""
    out = subprocess.run(
        ["bash", str(HACK_DIR / script)], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])


@dataclass(frozen=True)
class Toolset:
    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    def bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    @property
    def kuberay_crds(self) -> list[Path]:
        return sorted((self.root / "kuberay-crds").glob("*.yaml"))

    @property
    def kwok_stages(self) -> Path:
        return self.root / "kwok-stages"


def ensure_built() -> Toolset:
    """Build (once; cached under ~/.cache/grpo-operator) and return the binaries' location.

    ``GRPO_CONTROLPLANE_DIR`` points at an already built tree instead."""
    override = os.environ.get("GRPO_CONTROLPLANE_DIR")
    if override:
        return Toolset(Path(override))
    return Toolset(built("build-controlplane.sh"))
