"""Markdown tables and number formats of the benchmark sections."""

from __future__ import annotations

import pytest

from bench.tables import MISSING, markdown_table, percent, rate, ratio, seconds, times


def test_markdown_table_aligns_numbers_right_and_prints_missing_cells():
    table = markdown_table(["side", "s/step", "ratio"],
                           [["ours", 1.5, None], ["TRL", 0.5, "3.00×"]])
    assert table.splitlines() == [
        "| side | s/step | ratio |",
        "| --- | ---: | ---: |",
        f"| ours | 1.5 | {MISSING} |",
        "| TRL | 0.5 | 3.00× |",
    ]


def test_formatted_numbers_count_as_numeric_columns():
    rule = markdown_table(["a", "b", "c", "d", "e"],
                          [["1,234", "12%", "0.50×", "0.61 (55%)", "TRL"]]).splitlines()[1]
    assert rule == "| ---: | ---: | ---: | ---: | --- |"


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown_table(["a", "b", "c"], [["x", "y"]])


def test_ratio_is_none_without_both_figures():
    assert ratio(3.0, 1.5) == 2.0
    assert ratio(None, 1.0) is None
    assert ratio(1.0, None) is None
    assert ratio(1.0, 0.0) is None


def test_formats():
    assert times(2.0) == "2.00×" and times(None) == MISSING
    assert percent(0.456) == "46%" and percent(None) == MISSING
    assert seconds(0.1234) == "0.123" and seconds(12.345) == "12.35" and seconds(None) == MISSING
    assert rate(12345.6) == "12,346" and rate(None) == MISSING
