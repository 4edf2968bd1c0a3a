"""Percentiles, figures and the document of ``make bench`` (pure)."""

from __future__ import annotations

import datetime

import pytest

from bench.report import document, machine, merge, number, percentile, provenance, stamped


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


def test_each_section_says_when_where_and_how_under_its_heading():
    started = datetime.datetime(2026, 1, 2, 3, 4, tzinfo=datetime.UTC)
    line = provenance("make bench", started=started, seconds=90, machine_line="2 cores")
    assert line == ("Measured 2026-01-02 03:04 UTC on 2 cores, with `make bench` "
                    "(1.5 min for the run).")
    assert stamped("## A\n\nfirst\n", line) == f"## A\n\n{line}\n\nfirst"
    text = document([stamped("## A\n\nfirst\n", line), "## B"])
    assert text.startswith("# Benchmarks\n")
    assert text.index("## A\n\nMeasured 2026-01-02") < text.index("first") < text.index("## B")
    assert text.endswith("## B\n")


PREVIOUS = """# Benchmarks

Old head.

## Trainer

Measured yesterday.

| old table |

<!-- note -->
Why the trainer is slow.

### Tried and left
A paragraph.
<!-- /note -->

A generated closing line.

## Checkpoint (one-off)

Written by hand, never generated.

## Operator

Measured yesterday.

<!-- note -->
Operator gap.
<!-- /note -->
"""


def test_a_rerun_part_replaces_its_section_and_keeps_the_notes_written_about_it():
    merged = merge(PREVIOUS, ["## Trainer\n\nMeasured today.\n\n| new table |"])
    assert [m.partition("\n")[0] for m in merged] == [
        "## Trainer", "## Checkpoint (one-off)", "## Operator"]
    trainer = merged[0]
    assert "| new table |" in trainer and "old table" not in trainer
    assert "A generated closing line." not in trainer
    assert trainer.endswith("<!-- note -->\nWhy the trainer is slow.\n\n### Tried and left\n"
                            "A paragraph.\n<!-- /note -->")
    # What this run did not measure stays as it was.
    assert merged[1] == "## Checkpoint (one-off)\n\nWritten by hand, never generated."
    assert merged[2] == PREVIOUS[PREVIOUS.index("## Operator"):].strip()


def test_a_new_section_comes_last_and_nothing_previous_is_lost():
    merged = merge(PREVIOUS, ["## Recovery\n\nnew", "## Operator\n\nMeasured today."])
    assert [m.partition("\n")[0] for m in merged] == [
        "## Trainer", "## Checkpoint (one-off)", "## Operator", "## Recovery"]
    assert merged[2] == "## Operator\n\nMeasured today.\n\n<!-- note -->\nOperator gap.\n" \
        "<!-- /note -->"
    assert merge("", ["## A\n\nx"]) == ["## A\n\nx"]


def test_the_machine_line_names_cores_and_memory():
    line = machine()
    assert " cores, " in line and " GiB memory" in line
