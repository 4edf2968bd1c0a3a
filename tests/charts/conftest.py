"""Fixtures for the chart's tests. The release (``chart_identity``) is the session's, shared with
the operator's tests (tests/operator/conftest.py). The operator these tests drive runs as its
ServiceAccount too, but only for the module that needs it: a cluster-wide operator left running
would act on the runs of tests that expect none (tests/operator/api)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.conftest import new_namespace
from tests.operator.conftest import (  # noqa: F401 - fixtures
    OperatorProcess,
    chart_identity,
    grporun_crd,
    host_path_settings,
    running_session_operator,
)
from tests.operator.lifecycle.runs import Runs


@contextlib.contextmanager
def session_operator_paused(request: pytest.FixtureRequest) -> Iterator[None]:
    """The session's cluster-wide operator stopped for the duration, if it runs."""
    running = running_session_operator(request)
    with running.paused() if running else contextlib.nullcontext():
        yield


@pytest.fixture(scope="module")
def chart_operator(cluster, chart_identity, tmp_path_factory,  # noqa: F811
                   request) -> Iterator[OperatorProcess]:
    """An operator running as the chart's ServiceAccount for this module: the session's if it
    already runs, else one of the module's own, whose log must show no RBAC refusal."""
    running = running_session_operator(request)
    if running is not None:
        yield running
        return
    process = OperatorProcess(cluster, tmp_path_factory.mktemp("chart-operator") / "operator.log",
                              kubeconfig=chart_identity.kubeconfig,
                              env=host_path_settings(tmp_path_factory))
    process.start()
    yield process
    process.stop()
    assert process.refusals() == []


@pytest.fixture
def runs(k8s_api, chart_operator) -> Runs:
    """GRPORuns in a fresh namespace served by the chart's operator."""
    return Runs(k8s_api, new_namespace(k8s_api, "chart"))
