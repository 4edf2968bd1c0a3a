"""The demo's curve: a table and a picture with axes, values and a legend, from the steps the
status showed (a step the poll missed is absent, a KL a run without reference lacks)."""

from __future__ import annotations

from PIL import Image

from demo.watch import Curve, curve_figure, write_curve


def _curve() -> Curve:
    curve = Curve()
    for step, reward, kl in ((1, 0.125, 0.0), (2, 0.25, 0.0021), (4, 0.5, 0.0042)):
        curve.add({"completedSteps": step, "rewardMean": reward, "kl": kl})
    return curve


def test_the_picture_has_both_series_on_their_own_axes_with_a_legend():
    figure = curve_figure(_curve())
    reward_axis, kl_axis = figure.axes
    assert reward_axis.get_xlabel() == "optimizer step"
    assert (reward_axis.get_ylabel(), kl_axis.get_ylabel()) == (
        "reward mean", "KL to the reference")
    assert [t.get_text() for t in reward_axis.get_legend().get_texts()] == ["reward mean", "KL"]
    (reward,), (kl,) = reward_axis.get_lines(), kl_axis.get_lines()
    assert list(reward.get_xdata()) == [1, 2, 4] and list(reward.get_ydata()) == [0.125, 0.25, 0.5]
    assert list(kl.get_ydata()) == [0.0, 0.0021, 0.0042]
    figure.canvas.draw()  # the axes carry their values
    assert [t.get_text() for t in reward_axis.get_xticklabels() if t.get_text()]


def test_the_files_are_a_table_and_a_png(tmp_path):
    curve = _curve()
    curve.add({"completedSteps": 5, "rewardMean": 0.5})  # no reference model: no KL
    text, png = write_curve(curve, tmp_path)
    assert text.read_text().splitlines() == [
        "step  reward_mean  kl",
        "   1       0.1250  0.00000",
        "   2       0.2500  0.00210",
        "   4       0.5000  0.00420",
        "   5       0.5000  -",
    ]
    with Image.open(png) as image:
        assert (image.format, image.size) == ("PNG", (800, 450))
