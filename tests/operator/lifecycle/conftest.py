from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import delete_namespace, new_namespace
from tests.operator.lifecycle.runs import Runs


@pytest.fixture
def runs(k8s_api, operator, kstatus, tmp_path) -> Iterator[Runs]:
    """A fresh namespace watched by the running operator, with input dirs under tmp_path;
    deleted with its runs afterwards."""
    for sub in ("model", "data", "checkpoints"):
        (tmp_path / sub).mkdir()
    name = new_namespace(k8s_api, "op")
    yield Runs(k8s_api, name, kstatus)
    delete_namespace(k8s_api, name)
