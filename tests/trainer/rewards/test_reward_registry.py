import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_trainer.rewards import (
    REWARD_NAMES,
    REWARD_OPTIONS,
    build_reward,
    build_reward_from_spec,
)


def test_names_and_option_keys():
    assert REWARD_NAMES == ("gsm8k", "math_boxed", "exact_match", "regex")
    assert REWARD_OPTIONS == {
        "gsm8k": (),
        "math_boxed": (),
        "exact_match": ("caseSensitive", "strip"),
        "regex": ("pattern", "group", "caseSensitive", "strip"),
    }


@pytest.mark.parametrize(
    ("spec", "completion", "truth", "expected"),
    [
        ({"name": "gsm8k"}, "#### 1,234", "1234", 1.0),
        ({"name": "math_boxed"}, "\\boxed{\\dfrac{1}{2}}", "0.5", 1.0),
        ({"name": "exact_match", "caseSensitive": False, "strip": True}, " YES ", "yes", 1.0),
        ({"name": "exact_match"}, "YES", "yes", 0.0),
        ({"name": "regex", "pattern": r"=\s*(?P<answer>\d+)"}, "x = 3", "3", 1.0),
        ({"name": "regex", "pattern": r"<(?P<v>\w+)>", "group": "v"}, "<Ok>", "ok", 0.0),
        (
            {"name": "regex", "pattern": r"<(?P<v>\w+)>", "group": "v", "caseSensitive": False},
            "<Ok>",
            "ok",
            1.0,
        ),
        ({"name": "exact_match", "caseSensitive": None}, "a", "a", 1.0),  # null = unset
    ],
)
def test_build_from_crd_spec(spec, completion, truth, expected):
    reward = build_reward_from_spec(spec)
    assert reward(completion, truth) == expected
    options = {k: v for k, v in spec.items() if k != "name"}
    assert build_reward(spec["name"], options)(completion, truth) == expected


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("gsm8k_flexible", {}, "unknown reward 'gsm8k_flexible'"),
        ("gsm8k", {"strict": True}, r"unknown option\(s\) \['strict'\]; accepted: none"),
        ("exact_match", {"case_sensitive": False}, "accepted: caseSensitive, strip"),
        ("exact_match", {"caseSensitive": "no"}, "'caseSensitive' must be bool"),
        ("regex", {}, r"missing required option\(s\) \['pattern'\]"),
        ("regex", {"pattern": 5}, "'pattern' must be str"),
        ("regex", {"pattern": "(?P<answer>"}, "invalid pattern"),
        ("regex", {"pattern": r"(\d)"}, "no named group 'answer'"),
    ],
)
def test_config_errors(name, options, message):
    with pytest.raises(ValueError, match=message):
        build_reward(name, options)


def test_spec_without_name():
    with pytest.raises(ValueError, match="name"):
        build_reward_from_spec({"pattern": "x"})


def test_rewards_survive_pickling():  # they travel to Ray workers
    for spec in ({"name": "gsm8k"}, {"name": "regex", "pattern": r"(?P<answer>\d+)"}):
        reward = pickle.loads(pickle.dumps(build_reward_from_spec(spec)))
        assert reward("#### 7", "7") == 1.0


FRAGMENTS = [
    "####",
    "#",
    "$",
    "\\$",
    "\\boxed",
    "\\boxed{",
    "\\fbox",
    "{",
    "}",
    "\\{",
    "\\}",
    "\\",
    "\\frac",
    "\\dfrac",
    "\\text{",
    "\\left(",
    "\\right)",
    "^\\circ",
    "=",
    "/",
    ",",
    ".",
    "-",
    "\u2212",
    "%",
    " ",
    "\n",
    "1",
    "0",
    "42",
    "9" * 120,
    "Answer:",
    "answer",
    "<",
    ">",
    "\x00",
]
TEXT = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=30).map("".join)
REWARDS = [
    build_reward("gsm8k"),
    build_reward("math_boxed"),
    build_reward("exact_match", {"caseSensitive": False}),
    build_reward("regex", {"pattern": r"(?i)answer:\s*(?P<answer>\S+)"}),
]


@settings(max_examples=100, deadline=None)
@given(TEXT, TEXT)
def test_total_on_arbitrary_text(completion, truth):
    for reward in REWARDS:
        assert reward(completion, truth) in (0.0, 1.0)
        assert reward(truth, truth) in (0.0, 1.0)
