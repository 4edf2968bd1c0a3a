import pytest

from grpo_trainer.rewards.exact_match import ExactMatchReward

CASES = [
    # (options, completion, ground truth, reward)
    ({}, "Paris", "Paris", 1.0),
    ({}, "  Paris\n", "Paris", 1.0),
    ({}, "paris", "Paris", 0.0),
    ({}, "Paris.", "Paris", 0.0),
    ({}, "The answer is Paris", "Paris", 0.0),
    ({"case_sensitive": False}, "PARIS", "paris", 1.0),
    ({"case_sensitive": False}, "Straße", "STRASSE", 1.0),  # casefold, not lower
    ({"strip": False}, " Paris", "Paris", 0.0),
    ({"strip": False}, "Paris", "Paris", 1.0),
    ({}, "", "Paris", 0.0),
    ({}, "", "", 0.0),  # an empty ground truth matches nothing
    ({}, "   ", "  ", 0.0),
    ({}, None, "Paris", 0.0),
    ({}, "42", 42, 1.0),
    ({}, "P" * 1_000_000, "P" * 1_000_000, 1.0),
    ({"case_sensitive": False}, "p" * 1_000_000 + "x", "P" * 1_000_000, 0.0),
]


@pytest.mark.parametrize(("options", "completion", "truth", "expected"), CASES)
def test_table(options, completion, truth, expected):
    assert ExactMatchReward(**options)(completion, truth) == expected
