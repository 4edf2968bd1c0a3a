"""Fixtures shared by the operator's tests: the GRPORun CRD, installed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_operator.api.constants import CRD_NAME
from grpo_operator.api.generate import CRD_PATH as _CRD_RELATIVE

CRD_PATH = Path(__file__).resolve().parents[2] / _CRD_RELATIVE


@pytest.fixture(scope="session")
def grporun_crd(cluster) -> str:
    """Installs the checked-in CRD (server-side, as users are told to) and waits for it."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_PATH))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    return CRD_NAME


