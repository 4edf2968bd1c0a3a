"""Which groups a step with dynamic sampling trains on."""

from __future__ import annotations

from grpo_trainer.dynamic_sampling import DynamicSampling


def test_groups_with_a_spread_come_first_in_generation_order_up_to_the_step():
    sampling = DynamicSampling(prompts_per_step=3)
    sampling.judge({"0.0": [1, 1], "0.1": [0, 1], "0.2": [0, 0]})
    assert not sampling.full
    sampling.judge({"0.0": [1, 1], "0.1": [0, 1], "0.2": [0, 0], "0.3": [0.5, 0.2],
                    "0.4": [1, 0], "0.5": [1, 0]})
    assert sampling.full
    assert sampling.chosen() == ["0.1", "0.3", "0.4"]
    assert (sampling.shortfall, sampling.filtered) == (0, 3)


def test_when_the_rounds_run_out_uniform_groups_fill_the_step():
    sampling = DynamicSampling(prompts_per_step=3)
    sampling.judge({"0.0": [1, 1], "0.1": [0, 1], "0.2": [0, 0], "0.3": [1, 1]})
    assert sampling.chosen() == ["0.1", "0.0", "0.2"]
    assert (sampling.shortfall, sampling.filtered) == (2, 1)
