import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_trainer.rewards.gsm8k import GSM8KReward, extract_answer

SOLUTION = (
    "Natalia sold 48/2 = 24 clips in May.\n"
    "Natalia sold 48 + 24 = 72 clips altogether in April and May.\n"
)

CASES = [
    # (completion, ground truth, reward)
    (SOLUTION + "#### 72", "72", 1.0),
    (SOLUTION + "#### 72\n", "72", 1.0),
    (SOLUTION + "####72", "72", 1.0),
    (SOLUTION + "#### 72.", "72", 1.0),
    (SOLUTION + "#### 72.0", "72", 1.0),
    (SOLUTION + "#### $72", "72", 1.0),
    (SOLUTION + "#### \\$72", "72", 1.0),
    (SOLUTION + "#### 72 clips", "72", 1.0),
    ("The total is 1,234 dollars.\n#### 1,234", "1234", 1.0),
    ("#### 1234", "1,234", 1.0),
    ("#### -5", "-5", 1.0),
    ("#### \u22125", "-5", 1.0),
    ("#### 0.5", ".5", 1.0),
    ("#### 72", 72, 1.0),  # a dataset may store the answer as a number
    ("#### 72", "Step one...\n#### 72", 1.0),  # a full solution as ground truth
    # wrong
    (SOLUTION + "#### 71", "72", 0.0),
    (SOLUTION + "#### 720", "72", 0.0),
    ("#### -72", "72", 0.0),
    ("#### 7.2", "72", 0.0),
    # no strict marker
    (SOLUTION + "The answer is 72.", "72", 0.0),
    (SOLUTION + "# 72", "72", 0.0),
    ("\\boxed{72}", "72", 0.0),
    ("#### seventy-two", "72", 0.0),
    ("#### **72**", "72", 0.0),
    # several markers: only the last counts, and a malformed last one is not rescued
    ("#### 5\nWait, let me redo this.\n#### 72", "72", 1.0),
    ("#### 72\nWait, let me redo this.\n#### 5", "72", 0.0),
    ("#### 72\n####", "72", 0.0),
    ("#### 72 #### x", "72", 0.0),
    # malformed and empty
    ("", "72", 0.0),
    ("####", "72", 0.0),
    ("#### ,", "72", 0.0),
    ("#### .", "72", 0.0),
    ("#### 72", "", 0.0),
    ("#### 72", "seventy-two", 0.0),
    ("#### 72", None, 0.0),
    (None, "72", 0.0),
    # huge inputs
    ("x" * 2_000_000 + "\n#### 72", "72", 1.0),
    ("#### " + "9" * 100_000, "9" * 100_000, 0.0),  # not an answer: too long to parse
    ("####" * 100_000 + " 72", "72", 1.0),
    ("#### 72" + " " * 1_000_000, "72", 1.0),
]


@pytest.mark.parametrize(("completion", "truth", "expected"), CASES)
def test_table(completion, truth, expected):
    assert GSM8KReward()(completion, truth) == expected


def test_extract_answer():
    assert extract_answer("a #### 1 b #### $3,000.50 tail") == "3,000.50"
    assert extract_answer("no marker") is None
    assert extract_answer("#### nothing") is None


@settings(max_examples=100, deadline=None)
@given(st.integers(-(10**15), 10**15), st.sampled_from(["{:,}", "{}", "${:,}.", "{}.00"]))
def test_any_integer_in_any_accepted_spelling(n, spelling):
    completion = "Some reasoning.\n#### " + spelling.format(n)
    assert GSM8KReward()(completion, str(n)) == 1.0
    assert GSM8KReward()(completion, str(n + 1)) == 0.0
