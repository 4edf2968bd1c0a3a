"""Operator settings from the environment."""

from __future__ import annotations

import pytest

from grpo_operator.settings import from_env


def test_defaults_and_overrides():
    default = from_env({})
    assert (default.workers, default.metrics_port, default.sweep_seconds) == (4, 0, 300)
    assert default.policy.cluster_unhealthy_seconds == 300
    own = from_env({"GRPO_WORKERS": "4", "GRPO_METRICS_PORT": "9090",
                    "GRPO_CLUSTER_UNHEALTHY_SECONDS": "12.5",
                    "GRPO_METER_INTERVAL_SECONDS": "5", "GRPO_SWEEP_SECONDS": "0"})
    assert (own.workers, own.metrics_port, own.sweep_seconds) == (4, 9090, 0)
    assert own.policy.cluster_unhealthy_seconds == 12.5
    assert own.policy.meter_interval_seconds == 5
    assert from_env({"WATCH_NAMESPACES": "team-a, team-b,"}).namespaces == ("team-a", "team-b")


@pytest.mark.parametrize("env", [{"GRPO_METRICS_PORT": "http"},
                                 {"GRPO_CLUSTER_UNHEALTHY_SECONDS": "-1"}])
def test_a_malformed_setting_is_an_error_naming_it(env):
    with pytest.raises(ValueError, match=next(iter(env))):
        from_env(env)
