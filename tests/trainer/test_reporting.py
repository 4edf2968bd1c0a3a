"""Report lines: what the trainer prints is a valid contract report, and the driver's relay
writes only newer reports of its own attempt, signed, whatever the chunking of the log and
whatever else the log holds; a failed write of the terminal report is retried."""

from __future__ import annotations

import asyncio
import datetime
import io
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_operator.api.constants import Outcome, Reason
from grpo_operator.api.report import (
    MAX_SEQUENCE_STEP,
    REPORT_KEY,
    REPORT_SIGNATURE_KEY,
    TrainerState,
    parse_report,
    signature_valid,
)
from grpo_operator.api.status import TrainerLedger, TrainerTerminal
from grpo_trainer.driver.logs import LogFollower
from grpo_trainer.driver.relay import (
    Backoff,
    ConfigMapSink,
    ReportKeyError,
    ReportRelay,
    read_report_key,
)
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


# --- lines that cannot be reports -------------------------------------------------------------

GOOD = '{"schemaVersion": 1, "attempt": 2, "sequence": 3, "state": "Running"}'


def test_a_report_line_gives_its_document_cursor_and_whether_it_is_terminal():
    found = parse_report_line(f"  {REPORT_MARKER}{GOOD}\r")
    assert found == (GOOD, (2, 3), False)
    finished = GOOD.replace("Running", "Finished")
    assert parse_report_line(REPORT_MARKER + finished).finished


@pytest.mark.parametrize("text", [
    '{"attempt": Infinity, "sequence": 0}',
    '{"attempt": 1, "sequence": -Infinity}',
    '{"attempt": NaN, "sequence": 0}',
    '{"attempt": 1, "sequence": 0, "ledger": {"rewardMean": NaN}}',  # anywhere in it
    '{"attempt": 1, "sequence": 0, "ledger": {"kl": 1e999}}',  # parses as infinity
    '{"attempt": 1e999, "sequence": 0}',
    '{"attempt": ' + "9" * 5000 + ', "sequence": 0}',  # over Python's digit limit
    '{"attempt": 99999999999999999999, "sequence": 0}',  # over the contract's bound
    '{"attempt": 1, "sequence": 9007199254740993}',
    '{"attempt": 0, "sequence": 0}',
    '{"attempt": 1, "sequence": -1}',
    '{"attempt": "1", "sequence": 0}',
    '{"attempt": true, "sequence": 0}',
    '{"attempt": 1.5, "sequence": 0}',
    '{"attempt": [1], "sequence": 0}',
    '{"sequence": 0}',
    "[1, 2]", '"a string"', "3", "null",
    "[" * 100_000,  # deeper than the parser's recursion
    "{" * 100_000,
    "not json at all", '{"attempt": 1, "sequence": 0', "", "\udcff",
])
def test_a_line_that_cannot_be_a_report_is_none(text):
    assert parse_report_line(REPORT_MARKER + text) is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20,
    ).map(json.dumps),
    st.fixed_dictionaries({"attempt": st.integers() | st.floats(), "sequence": st.integers()
                           | st.floats()}).map(json.dumps),
))
def test_parsing_never_raises(text):
    found = parse_report_line(REPORT_MARKER + text)
    if found is not None:
        doc = json.loads(found.text)
        assert (doc["attempt"], doc["sequence"]) == found.cursor
        assert found.cursor[0] >= 1 and found.cursor[1] >= 0


class _Stream:
    """The Jobs API's log websocket, sending ``chunks`` once (a stream that breaks would be
    reopened and replayed from the beginning)."""

    def __init__(self, chunks: list[str]):
        self.chunks = chunks
        self.opened = 0

    async def tail_job_logs(self, _job_id):
        self.opened += 1
        for chunk in self.chunks:
            yield chunk
            await asyncio.sleep(0)


def _published(attempt: int, states: list[TrainerState]) -> list[str]:
    """The log lines of reports of ``attempt`` in ``states`` (sequences 0, 1, ...)."""
    out = io.StringIO()
    reporter = Reporter(attempt=attempt, stream=out)
    for step, state in enumerate(states):
        terminal = None
        if state == TrainerState.FINISHED:
            terminal = TrainerTerminal(outcome=Outcome.FAILED, reason=Reason.INVALID_INPUT,
                                       finished_time=datetime.datetime(2025, 1, 2,
                                                                       tzinfo=datetime.UTC))
        reporter.publish(state, TrainerLedger(planned_steps=9, completed_steps=step),
                         terminal=terminal)
    return _lines(out)


def test_bad_lines_never_stop_the_relay_nor_reopen_the_log():
    good = _published(1, [TrainerState.STARTING, TrainerState.RUNNING, TrainerState.RUNNING])
    bad = [f"{REPORT_MARKER}{text}" for text in (
        '{"attempt": Infinity, "sequence": 0}', '{"attempt": 1, "sequence": NaN}',
        '{"attempt": 1e999, "sequence": 5}', "[" * 100_000, "[1]", "garbage",
        '{"attempt": "1", "sequence": 7}', '{"attempt": ' + "9" * 5000 + ', "sequence": 0}',
    )]
    chunks = [good[0] + "\n", *(line + "\n" for line in bad[:4]), good[1] + "\n",
              *(line + "\n" for line in bad[4:]), good[2] + "\n", "the end"]
    stream, out, written = _Stream(chunks), io.StringIO(), []
    follower = LogFollower(stream, "job", out, [ReportRelay(written.append, attempt=1)])
    follower.start()
    assert follower.finish(timeout=30)
    assert stream.opened == 1  # no error escaped into the stream
    assert out.getvalue() == "".join(chunks)
    assert [parse_report_line(REPORT_MARKER + w).cursor for w in written] == [
        (1, 0), (1, 1), (1, 2)]


def test_reports_of_another_attempt_or_far_ahead_do_not_silence_the_relay():
    good = _published(3, [TrainerState.RUNNING] * 3)
    written: list[str] = []
    relay = ReportRelay(written.append, attempt=3)
    relay.feed(good[0] + "\n")
    relay.feed(f'{REPORT_MARKER}{{"attempt": 4, "sequence": 0}}\n')
    relay.feed(f'{REPORT_MARKER}{{"attempt": 3, "sequence": {MAX_SEQUENCE_STEP + 1}}}\n')
    relay.feed("\n".join(good[1:]) + "\n")
    assert [parse_report_line(REPORT_MARKER + w).cursor for w in written] == [(3, 0), (3, 2)]
    # Without an attempt of its own (the metrics relay) a later attempt is newer...
    other = ReportRelay(written.append)
    other.feed(good[2] + "\n" + f'{REPORT_MARKER}{{"attempt": 4, "sequence": 0}}\n')
    assert parse_report_line(REPORT_MARKER + written[-1]).cursor == (4, 0)
    # ...but a jump is refused all the same.
    other.feed(f'{REPORT_MARKER}{{"attempt": 4, "sequence": {MAX_SEQUENCE_STEP + 1}}}\n')
    assert parse_report_line(REPORT_MARKER + written[-1]).cursor == (4, 0)


# --- the terminal report's write --------------------------------------------------------------

class _FailingSink:
    """A sink that fails its first ``failures`` calls (None: every call)."""

    def __init__(self, failures: int | None):
        self.failures = failures
        self.calls: list[tuple[float, str]] = []
        self.written: list[str] = []

    def __call__(self, text: str) -> None:
        self.calls.append((time.monotonic(), text))
        if self.failures is None or len(self.calls) <= self.failures:
            raise ConnectionResetError("connection reset by peer")
        self.written.append(text)


FAST = Backoff(timeout=5.0, first=0.05, longest=0.2)


def test_a_failed_terminal_write_is_retried_with_backoff_until_written():
    lines = _published(1, [TrainerState.RUNNING, TrainerState.FINISHED])
    sink = _FailingSink(failures=4)
    relay = ReportRelay(sink, attempt=1, terminal_retry=FAST)
    relay.feed(lines[0] + "\n")  # fails: best-effort, not retried
    relay.feed(lines[1] + "\n")  # fails: the terminal report
    assert sink.written == []

    assert relay.settle()

    assert [parse_report_line(REPORT_MARKER + w).cursor for w in sink.written] == [(1, 1)]
    assert parse_report_line(REPORT_MARKER + sink.written[0]).finished
    times = [t for t, _ in sink.calls]
    assert len(times) == 5  # 2 in the stream, then 3 retries
    waits = [b - a for a, b in zip(times[1:], times[2:], strict=False)]
    assert waits[0] >= 0.05 and waits[1] >= 0.1 and waits[2] >= 0.2  # doubling
    assert relay.settle()  # nothing left: no more writes
    assert len(sink.calls) == 5


def test_a_terminal_write_that_keeps_failing_gives_up_after_the_timeout():
    lines = _published(1, [TrainerState.RUNNING, TrainerState.FINISHED])
    sink = _FailingSink(failures=None)
    relay = ReportRelay(sink, attempt=1, terminal_retry=Backoff(timeout=0.6, first=0.05,
                                                                longest=0.1))
    relay.feed("\n".join(lines) + "\n")
    started = time.monotonic()
    assert not relay.settle()
    assert 0.6 <= time.monotonic() - started < 3
    assert len(sink.calls) >= 5 and {text for _, text in sink.calls} == {lines[1][12:]}


def test_a_replayed_log_writes_the_terminal_report_and_other_failures_are_not_retried():
    lines = _published(1, [TrainerState.RUNNING, TrainerState.FINISHED])
    sink = _FailingSink(failures=1)
    relay = ReportRelay(sink, attempt=1, terminal_retry=FAST)
    relay.feed("\n".join(lines) + "\n")
    relay.feed("\n".join(lines) + "\n")  # a reopened stream: the next chance
    assert relay.settle() and len(sink.calls) == 2
    running = ReportRelay(_FailingSink(failures=None), attempt=1, terminal_retry=FAST)
    running.feed(lines[0] + "\n")
    assert running.settle()  # a non-terminal report is best-effort


# --- signing and the report key ---------------------------------------------------------------

class _RecordingCore:
    """Records the patches a CoreV1Api would send."""

    def __init__(self):
        self.patches: list[tuple[str, str, dict, float]] = []

    def patch_namespaced_config_map(self, name, namespace, body, _request_timeout=None):
        self.patches.append((name, namespace, body, _request_timeout))


def test_every_write_carries_the_reports_signature_in_the_same_patch():
    key = b"\x00k\xffey\n"  # raw bytes, whitespace included
    core = _RecordingCore()
    sink = ConfigMapSink("ns", "run-report", REPORT_KEY, key, request_timeout=7, core=core)
    relay = ReportRelay(sink, attempt=1)
    lines = _published(1, [TrainerState.RUNNING, TrainerState.RUNNING])
    relay.feed(lines[0] + "\n")
    relay.feed(lines[1] + "\n")
    assert len(core.patches) == 2
    for (name, namespace, body, timeout), line in zip(core.patches, lines, strict=True):
        assert (name, namespace, timeout) == ("run-report", "ns", 7)
        assert set(body["data"]) == {REPORT_KEY, REPORT_SIGNATURE_KEY}
        text = body["data"][REPORT_KEY]
        assert text == line[len(REPORT_MARKER):]
        assert signature_valid(key, text, body["data"][REPORT_SIGNATURE_KEY])
        assert not signature_valid(key.strip(), text, body["data"][REPORT_SIGNATURE_KEY])


def test_the_report_key_is_the_files_raw_bytes_and_a_missing_or_empty_one_is_refused(tmp_path):
    path = tmp_path / "report_key"
    path.write_bytes(b" key\n")
    assert read_report_key(str(path)) == b" key\n"
    path.write_bytes(b"")
    with pytest.raises(ReportKeyError, match="is empty"):
        read_report_key(str(path))
    with pytest.raises(ReportKeyError, match="cannot read the report key file"):
        read_report_key(str(tmp_path / "absent"))
    with pytest.raises(ReportKeyError, match="GRPO_REPORT_KEY_PATH is not set"):
        read_report_key(None)
