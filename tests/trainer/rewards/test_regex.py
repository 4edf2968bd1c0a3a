import time

import pytest

from grpo_trainer.rewards.regex import MAX_SEARCH_CHARS, RegexReward

ANSWER = r"Answer:\s*(?P<answer>[^\n]+)"

CASES = [
    # (options, completion, ground truth, reward)
    ({}, "Reasoning...\nAnswer: 42", "42", 1.0),
    ({}, "Answer:42  ", "42", 1.0),  # strip
    ({}, "Answer: 41", "42", 0.0),
    ({}, "Answer: 1\nAnswer: 42", "42", 1.0),  # the last match counts
    ({}, "Answer: 42\nAnswer: 1", "42", 0.0),
    ({}, "answer: 42", "42", 0.0),  # the pattern is case-sensitive unless it says (?i)
    ({"pattern": r"(?i)answer:\s*(?P<answer>\S+)"}, "ANSWER: 42", "42", 1.0),
    ({"case_sensitive": False}, "Answer: Paris", "PARIS", 1.0),
    ({"case_sensitive": True}, "Answer: Paris", "PARIS", 0.0),
    ({"strip": False}, "Answer: 42 ", "42", 0.0),
    (
        {"pattern": r"<(?P<final>\d+)>|\[(?P<other>\d+)\]", "group": "final"},
        "<7> then [8]",
        "7",
        0.0,  # the last match is [8], where group 'final' did not take part
    ),
    ({"pattern": r"<(?P<final>\d+)>", "group": "final"}, "<6> <7>", "7", 1.0),
    ({}, "no answer here", "42", 0.0),
    ({}, "", "42", 0.0),
    ({}, None, "42", 0.0),
    ({}, "Answer: 42", "", 0.0),
    ({}, "Answer: 42", 42, 1.0),
    ({}, "z" * 5_000_000 + "\nAnswer: 42", "42", 1.0),
    ({}, "Answer: 42\n" + "z" * (MAX_SEARCH_CHARS + 1), "42", 0.0),  # outside the bound
]


@pytest.mark.parametrize(("options", "completion", "truth", "expected"), CASES)
def test_table(options, completion, truth, expected):
    reward = RegexReward.build(**{"pattern": ANSWER, **options})
    assert reward(completion, truth) == expected


def test_backtracking_is_bounded_by_the_input_cut():
    # a quadratic pattern on an adversarial 5 MB input (~10^13 steps unbounded): only the last
    # MAX_SEARCH_CHARS characters are scanned
    reward = RegexReward.build(r"(?P<answer>a+)b")
    start = time.monotonic()
    assert reward("a" * 5_000_000, "x") == 0.0
    assert time.monotonic() - start < 10


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pattern": "(?P<answer>[0-9"}, "invalid pattern"),
        ({"pattern": r"(\d+)"}, "no named group 'answer'"),
        ({"pattern": r"(?P<value>\d+)"}, "no named group 'answer'"),
        ({"pattern": r"(?P<answer>\d+)", "group": "value"}, "no named group 'value'"),
        ({"pattern": ""}, "non-empty"),
        ({"pattern": "(?P<answer>a)" + "b" * 2000}, "longer"),
    ],
)
def test_bad_patterns_fail_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        RegexReward.build(**options)
