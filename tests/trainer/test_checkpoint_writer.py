"""A checkpoint written beside training: the caller goes on at once, the checkpoint is announced
only once sealed, one is in flight at a time, and one that never finishes is never read."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from grpo_operator.api.checkpoint_layout import TMP_SUFFIX, complete_steps, parse_latest
from grpo_trainer.checkpoint import CheckpointStore, SavedCheckpoint
from grpo_trainer.checkpoint_writer import CheckpointWriter

WAIT_S = 30


class Ranks:
    """The learner ranks' part of a checkpoint, written when the test lets it."""

    def __init__(self, at_once: bool = False) -> None:
        self.go = threading.Event()
        if at_once:
            self.go.set()

    def write(self, content: str):
        def write(directory: Path):
            (directory / "trainer.json").write_text(content)  # the driver's part, now

            def finish() -> None:
                assert self.go.wait(WAIT_S)
                (directory / "rank_0.pt").write_text(content)
            return finish
        return write


def _failing(error: Exception):
    """A write whose ranks' part fails."""
    def write(directory: Path):
        def finish() -> None:
            raise error
        return finish
    return write


def _writer(root: Path):
    """A writer on a store at ``root``, and what it announced: each checkpoint with what a
    reader of the volume found at that moment."""
    store = CheckpointStore(root, keep=2)
    seen: list[tuple[SavedCheckpoint, SavedCheckpoint | None]] = []

    def announce(saved: SavedCheckpoint) -> None:
        seen.append((saved, store.verify(saved.step)))
    return store, seen, CheckpointWriter(store, announce)


def test_the_caller_goes_on_while_it_is_written_and_it_is_announced_once_sealed(tmp_path):
    store, seen, writer = _writer(tmp_path)
    ranks = Ranks()

    assert writer.hand_off(1, ranks.write("one")) is True
    # Handed off, not written: nothing is published while the ranks have not written.
    assert seen == [] and complete_steps(tmp_path) == []
    assert (tmp_path / f"step_1{TMP_SUFFIX}" / "trainer.json").read_text() == "one"
    ranks.go.set()
    writer.wait()
    [(saved, found)] = seen
    assert saved.step == 1 and saved.write_seconds is not None
    assert found is not None and found.sha256 == saved.sha256  # sealed before it was announced
    assert (saved.path / "rank_0.pt").read_text() == "one"
    assert parse_latest((tmp_path / "latest").read_text()) == 1
    assert writer.newest == saved
    writer.close()


def test_one_checkpoint_in_flight_the_next_hand_off_waits_for_it(tmp_path):
    store, seen, writer = _writer(tmp_path)
    first, second = Ranks(), Ranks(at_once=True)
    writer.hand_off(1, first.write("one"))

    handed = threading.Event()
    thread = threading.Thread(target=lambda: (writer.hand_off(2, second.write("two")),
                                              handed.set()))
    thread.start()
    assert not handed.wait(0.5)  # step 1 is still being written
    first.go.set()
    assert handed.wait(WAIT_S)
    thread.join()
    writer.close()
    assert [saved.step for saved, _ in seen] == [1, 2]
    assert complete_steps(tmp_path) == [1, 2]


def test_a_failed_write_is_raised_at_the_next_hand_off_and_never_read(tmp_path):
    store, seen, writer = _writer(tmp_path)
    ranks = Ranks(at_once=True)
    writer.hand_off(1, ranks.write("one"))
    writer.wait()

    writer.hand_off(2, _failing(OSError("No space left on device")))
    with pytest.raises(OSError, match="No space left"):
        writer.hand_off(3, ranks.write("three"))
    assert [saved.step for saved, _ in seen] == [1]
    assert (tmp_path / f"step_2{TMP_SUFFIX}").is_dir()  # left as it was, never announced
    assert store.newest_valid().step == 1


def test_an_attempt_that_dies_with_one_in_flight_resumes_from_the_one_before(tmp_path):
    store, _, writer = _writer(tmp_path)
    done, dying = Ranks(at_once=True), Ranks()
    writer.hand_off(1, done.write("one"))
    writer.hand_off(2, dying.write("two"))  # the process dies before the ranks have written
    assert parse_latest((tmp_path / "latest").read_text()) == 1

    after_restart = CheckpointStore(tmp_path, keep=2)
    assert after_restart.newest_valid().step == 1
    dying.go.set()  # let the abandoned thread end
    writer.close()


def test_close_waits_and_logs_a_failed_write_without_raising(tmp_path, caplog):
    store, _, writer = _writer(tmp_path)

    writer.hand_off(1, _failing(RuntimeError("the learner rank died")))
    writer.close()  # on the way out of an attempt that failed already
    assert "could not be written" in caplog.text and "learner rank died" in caplog.text


def test_a_step_checkpointed_already_is_announced_again_not_rewritten(tmp_path):
    store, seen, writer = _writer(tmp_path)
    ranks = Ranks(at_once=True)
    assert writer.hand_off(4, ranks.write("four")) is True
    assert writer.hand_off(4, ranks.write("never written")) is False  # e.g. SIGTERM right after
    writer.close()
    assert [saved.step for saved, _ in seen] == [4, 4]
    assert (seen[0][0].path / "trainer.json").read_text() == "four"
    assert seen[1][0].sha256 == seen[0][0].sha256
