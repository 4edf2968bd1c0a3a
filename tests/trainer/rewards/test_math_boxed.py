import pytest

from grpo_trainer.rewards.math_boxed import MathBoxedReward, last_boxed, normalize

CASES = [
    # (completion, ground truth, reward)
    ("So the answer is $\\boxed{5}$.", "5", 1.0),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\dfrac{1}{2}}", "\\frac12", 1.0),
    ("\\boxed{\\tfrac12}", "\\frac{1}{2}", 1.0),
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{1/2}", "\\frac{1}{2}", 1.0),
    ("\\boxed{-\\frac{3}{4}}", "-0.75", 1.0),
    ("\\boxed{1,000}", "1000", 1.0),
    ("\\boxed{1{,}000}", "1000", 1.0),
    ("\\boxed{2.50}", "2.5", 1.0),
    ("\\boxed{ 3 }", "3", 1.0),
    ("\\boxed{5.}", "5", 1.0),
    ("\\boxed{x = 5}", "5", 1.0),
    ("\\boxed{90^\\circ}", "90", 1.0),
    ("\\boxed{90^{\\circ}}", "90", 1.0),
    ("\\boxed{\\$18}", "18", 1.0),
    ("\\boxed{50\\%}", "50", 1.0),
    ("\\boxed{\\text{(B)}}", "(B)", 1.0),
    ("\\boxed{\\textbf{(C)}\\ 12}", "(C)12", 1.0),
    ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "(3,\\frac{\\pi}{2})", 1.0),
    ("\\boxed{\\sqrt2}", "\\sqrt{2}", 1.0),
    ("\\boxed{2\\!\\sqrt{3}}", "2\\sqrt{3}", 1.0),
    ("\\boxed{\\{1, 2\\}}", "\\{1,2\\}", 1.0),  # escaped braces do not unbalance
    ("\\boxed 7", "7", 1.0),
    ("$\\boxed 7$", "7", 1.0),
    ("\\fbox{7}", "7", 1.0),
    ("\\boxed{7}", "The answer is \\boxed{7}.", 1.0),  # boxed ground truth
    ("\\boxed{7}", 7, 1.0),
    # wrong
    ("\\boxed{6}", "5", 0.0),
    ("\\boxed{\\frac{1}{3}}", "\\frac{1}{2}", 0.0),
    ("\\boxed{(3, 2)}", "(2, 3)", 0.0),
    ("\\boxed{1/0}", "\\frac{1}{0}", 1.0),  # same text: equal though not a number
    ("\\boxed{1/0}", "0", 0.0),
    # no box, or several: the last one counts, a malformed last one is not rescued
    ("The answer is 5.", "5", 0.0),
    ("\\boxed{4} no wait \\boxed{5}", "5", 1.0),
    ("\\boxed{5} no wait \\boxed{4}", "5", 0.0),
    ("\\boxed{5} then \\boxed{", "5", 0.0),
    ("\\boxed{5} then \\boxed{\\frac{1}{2}", "5", 0.0),
    ("\\boxed", "5", 0.0),
    ("\\boxed{}", "5", 0.0),
    ("\\boxed{ }", "", 0.0),
    # nested braces
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}2", 1.0),
    ("\\boxed{{{{5}}}}", "{{{5}}}", 1.0),
    # empty and huge
    ("", "5", 0.0),
    (None, "5", 0.0),
    ("\\boxed{5}", "", 0.0),
    ("y" * 2_000_000 + "\\boxed{5}", "5", 1.0),
    ("\\boxed{" + "{" * 200_000 + "5", "5", 0.0),
    ("\\boxed{" + "1" * 5_000 + "}", "1" * 5_000, 0.0),  # too long to be an answer
    ("\\boxed{" * 50_000 + "5" + "}" * 50_000, "5", 1.0),
]


@pytest.mark.parametrize(("completion", "truth", "expected"), CASES)
def test_table(completion, truth, expected):
    assert MathBoxedReward()(completion, truth) == expected


def test_last_boxed():
    assert last_boxed("a \\boxed{1} b \\boxed{\\frac{a}{b}} c") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{a\\}b}") == "a\\}b"
    assert last_boxed("nothing") is None
    assert last_boxed("\\boxed{open") is None


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("\\left(1, 2\\right)", "(1,2)"),
        ("\\dfrac{a}{b}", "\\frac{a}{b}"),
        ("\\frac12", "\\frac{1}{2}"),
        ("\\frac1{22}", "\\frac{1}{22}"),
        ("\\frac{11}2", "\\frac{11}{2}"),
        ("\\text{ cm}", "cm"),
        (".5", "0.5"),
        ("10\\,000", "10000"),
        ("abc=5", "abc=5"),  # only short left sides are dropped
        ("\\frac", "\\frac"),
    ],
)
def test_normalize(raw, normal):
    assert normalize(raw) == normal
