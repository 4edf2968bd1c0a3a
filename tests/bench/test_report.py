"""Percentiles, figures and the document of ``make bench`` (pure)."""

from __future__ import annotations

import datetime

import pytest

from bench.report import document, machine, number, percentile


@pytest.mark.parametrize(("q", "expected"), [(0, 1.0), (50, 2.5), (95, 3.85), (100, 4.0)])
def test_percentiles_interpolate_between_the_closest_ranks(q, expected):
    assert percentile([4.0, 1.0, 3.0, 2.0], q) == pytest.approx(expected)


def test_a_percentile_of_one_value_is_that_value_and_of_none_is_missing():
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None


def test_figures_have_fixed_decimals_and_a_mark_when_missing():
    assert number(1.25, 1) == "1.2"
    assert number(3, 0) == "3"
    assert number(None) == "–"


def test_the_document_says_when_where_and_how_then_each_section():
    text = document("make bench", ["## A\n\nfirst\n", "## B"],
                    started=datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC),
                    seconds=90, machine_line="2 cores")
    assert text.startswith("# Benchmarks\n")
    assert "- date: 2026-01-02 03:04 UTC" in text
    assert "- machine: 2 cores" in text
    assert "- command: `make bench` (1.5 min)" in text
    assert text.index("## A\n\nfirst") < text.index("## B")
    assert text.endswith("## B\n")


def test_the_machine_line_names_cores_and_memory():
    line = machine()
    assert " cores, " in line and " GiB memory" in line
