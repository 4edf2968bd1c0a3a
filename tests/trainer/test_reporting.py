"""Report lines: what the trainer prints is a valid contract report, and the driver's relay
writes only newer reports, whatever the chunking of the log."""

from __future__ import annotations

import io

from grpo_operator.api.report import TrainerState, parse_report
from grpo_operator.api.status import TrainerLedger
from grpo_trainer.driver.relay import ReportRelay
from grpo_trainer.reporting import REPORT_MARKER, Reporter, parse_report_line


def _lines(out: io.StringIO) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line.startswith(REPORT_MARKER)]


def test_published_reports_are_numbered_contract_reports():
    out = io.StringIO()
    reporter = Reporter(attempt=2, stream=out)
    out.write("progress without a newline")
    reporter.publish(TrainerState.STARTING, TrainerLedger(planned_steps=3))
    reporter.publish(TrainerState.RUNNING, TrainerLedger(planned_steps=3, completed_steps=1))
    lines = _lines(out)
    assert len(lines) == 2
    reports = [parse_report(parse_report_line(line)[0]) for line in lines]
    assert [(r.attempt, r.sequence) for r in reports] == [(2, 0), (2, 1)]
    assert reports[1].ledger.completed_steps == 1


def test_relay_writes_the_newest_report_of_each_chunk_once():
    out = io.StringIO()
    reporter = Reporter(attempt=1, stream=out)
    for step in range(3):
        reporter.publish(TrainerState.RUNNING, TrainerLedger(planned_steps=3,
                                                             completed_steps=step))
    log = out.getvalue()
    written: list[str] = []
    relay = ReportRelay(written.append)
    cut = log.index(REPORT_MARKER, log.index(REPORT_MARKER) + 1) + 5  # inside the 2nd line
    relay.feed(log[:cut])
    relay.feed(log[cut:])
    relay.close()
    cursors = [parse_report_line(REPORT_MARKER + w)[1] for w in written]
    assert cursors == [(1, 0), (1, 2)]
    relay.feed(log)  # a replayed log (restarted stream) writes nothing older
    relay.close()
    assert len(written) == 2


def test_relay_starts_from_the_cursor_already_stored_and_survives_sink_errors():
    out = io.StringIO()
    reporter = Reporter(attempt=1, stream=out)
    reporter.publish(TrainerState.RUNNING, TrainerLedger(planned_steps=2))
    first = out.getvalue()
    reporter.publish(TrainerState.RUNNING, TrainerLedger(planned_steps=2, completed_steps=1))
    second = out.getvalue()[len(first):]

    failures = iter([RuntimeError("apiserver unavailable")])
    written: list[str] = []

    def flaky(text: str) -> None:
        error = next(failures, None)
        if error:
            raise error
        written.append(text)

    relay = ReportRelay(flaky, last=(1, 0))
    relay.feed(first)  # already stored: not written again
    assert written == []
    relay.feed(second)  # the sink fails: logged, not raised
    relay.feed(second)  # replayed after a stream break: written now
    assert [parse_report_line(REPORT_MARKER + w)[1] for w in written] == [(1, 1)]
