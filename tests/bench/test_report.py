"""Percentiles, figures and the document of ``make bench`` (pure)."""

from __future__ import annotations

import datetime
import re

import pytest

from bench.report import (
    document,
    machine,
    merge,
    number,
    percentile,
    provenance,
    sections_of,
    stamped,
)


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
    text = merge(PREVIOUS, ["## Trainer\n\nMeasured today.\n\n| new table |"])
    merged = list(sections_of(text).values())
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
    assert text.startswith(document([]).strip()) and "Old head." not in text
    # Written back and re-run, the same part gives the same document.
    assert merge(text, ["## Trainer\n\nMeasured today.\n\n| new table |"]) == text


def test_a_new_section_comes_last_and_nothing_previous_is_lost():
    text = merge(PREVIOUS, ["## Recovery\n\nnew", "## Operator\n\nMeasured today."])
    merged = list(sections_of(text).values())
    assert [m.partition("\n")[0] for m in merged] == [
        "## Trainer", "## Checkpoint (one-off)", "## Operator", "## Recovery"]
    assert merged[2] == "## Operator\n\nMeasured today.\n\n<!-- note -->\nOperator gap.\n" \
        "<!-- /note -->"
    assert merge("", ["## A\n\nx"]) == document(["## A\n\nx"])


def test_notes_in_the_head_and_headings_in_code_blocks_are_kept_where_they_are():
    previous = ("# Benchmarks\n\nold\n\n<!-- note -->\nAbout all runs.\n<!-- /note -->\n\n"
                "## A\n\nold\n\n<!-- note -->\n```\n## not a heading\n```\n<!-- /note -->\n")
    text = merge(previous, ["## A\n\nnew"])
    assert text.index("About all runs.") < text.index("## A")
    assert list(sections_of(text)) == ["## A"]
    assert sections_of(text)["## A"].endswith("```\n## not a heading\n```\n<!-- /note -->")


@pytest.mark.parametrize(("previous", "fresh", "says"), [
    ("## A\n\n<!-- note -->\nnever closed\n", ["## A\n\nnew"], "without its"),
    ("## A\n\none\n\n## A\n\ntwo\n", ["## B"], "two sections named '## A'"),
    ("## A\n", ["## B", "## B"], "two sections named '## B'"),
    ("## A\n", ["no heading"], "must start with a '## ' heading"),
])
def test_what_merge_cannot_place_is_an_error_not_a_loss(previous, fresh, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        merge(previous, fresh)


def test_the_machine_line_names_cores_and_memory():
    line = machine()
    assert " cores, " in line and " GiB memory" in line
