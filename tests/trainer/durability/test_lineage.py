"""The rollout ledger without engines: strict state loading, the journal, restart rules."""

from __future__ import annotations

import json
import shutil

import pytest

from grpo_trainer.batch import Completion
from grpo_trainer.journal.journal import Journal
from grpo_trainer.journal.ledger import PROMPT_GROUP, SIBLING, RolloutLedger
from grpo_trainer.journal.state import LedgerState, LedgerStateError

G = 2


def _attempt(i: int, slot: int, state: str, reward=None) -> dict:
    doc = {"id": f"{i:032x}", "slot": slot, "state": state}
    if reward is not None:
        doc["reward"] = reward
    return doc


def _state(groups=(), **extra) -> dict:
    return {"version": 1, "granularity": "sibling", "weightVersion": 3, "groups": list(groups),
            **extra}


def _group(attempts, state="generating", **extra) -> dict:
    return {"id": "3.0", "promptIndex": 5, "weightVersion": 3, "seed": 11, "groupSize": G,
            "state": state, "attempts": attempts, **extra}


def _load(doc: dict) -> LedgerState:
    return LedgerState.load(json.dumps(doc).replace("weightVersion", "weight_version")
                            .replace("promptIndex", "prompt_index")
                            .replace("groupSize", "group_size"))


def test_a_consistent_state_loads_and_round_trips():
    state = _load(_state([_group([_attempt(1, 0, "sealed", 0.5), _attempt(2, 1, "dispatched"),
                                  _attempt(3, 1, "failed")])]))
    assert state.groups[0].sealed_slots()[0].reward == 0.5
    assert LedgerState.load(state.model_dump_json()) == state


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        (_state(surprise=1), "Extra inputs"),
        ({**_state(), "version": 2}, "version"),
        (_state([_group([_attempt(1, 0, "sealed")])]), "sealed without a reward"),
        (_state([_group([_attempt(1, 0, "failed", 1.0)])]), "a reward on a failed attempt"),
        (_state([_group([_attempt(1, 0, "sealed", 1.0), _attempt(2, 1, "sealed", 0.0)])]),
         "generating, but every sibling is sealed"),
        (_state([_group([_attempt(1, 0, "sealed", 1.0)], state="sealed")]),
         "sealed, but not every sibling is"),
        (_state([_group([_attempt(1, 0, "sealed", 1.0), _attempt(2, 0, "sealed", 1.0)])]),
         "two sealed or two live"),
        (_state([_group([_attempt(1, 0, "sealed", 1.0), _attempt(2, 0, "reserved")])]),
         "a sealed slot with a live attempt"),
        (_state([_group([_attempt(1, 2, "reserved")])]), "outside groupSize"),
        (_state([_group([], weightVersion=2)]), "weight version 2"),
        (_state([_group([_attempt(1, 0, "sealed", "high")])]), "reward"),
        (_state([_group([_attempt(1, 0, "unknown")])]), "state"),
    ],
)
def test_inconsistent_states_are_rejected(doc, why):
    with pytest.raises(LedgerStateError, match=why):
        _load(doc)


def _completion(n: int) -> Completion:
    return Completion(tuple(range(n)), tuple(-0.5 for _ in range(n)), "a" * n, "length")


def _generate(ledger: RolloutLedger, fail_after: int | None = None) -> int:
    """Fill the open groups like the trainer does; stop (a crash) after ``fail_after`` seals."""
    sealed = 0
    requests = ledger.requests()
    for req, ids in zip(requests, ledger.dispatch(requests), strict=True):
        for attempt in ids:
            if sealed == fail_after:
                return sealed
            ledger.seal(req.group_id, attempt, _completion(3), 0.25 * sealed, 7)
            sealed += 1
    return sealed


def test_journal_restart_reuses_by_granularity_and_weight_version(tmp_path):
    journal_dir = tmp_path / "rollouts"
    # Process 1: step 0 completes (weights 0 -> 1); step 1 (weights 1) seals 3 of 4
    # completions (group 1.0 whole, one sibling of 1.1) and dies.
    first = RolloutLedger(SIBLING, Journal(journal_dir))
    first.open_step(0, [4, 9], [100, 200], G)
    assert _generate(first) == 4
    groups, scores = first.batch()
    assert [len(g) for g in groups] == [G, G] and scores == [0.0, 0.25, 0.5, 0.75]
    first.close_step()
    first.open_step(1, [2, 6], [300, 400], G)
    _generate(first, fail_after=3)
    with pytest.raises(ValueError, match="group 1.1 is not sealed"):
        first.batch()  # a step is never handed to the learner short
    first.journal.close()
    # A torn record at the end of the segment (the crash hit a write).
    segment = next(journal_dir.glob("w1-*.jsonl"))
    with open(segment, "ab") as fh:
        fh.write(b'{"kind": "seal", "attempt": "ab')
    for name in ("sibling", "group", "older"):  # one copy of the crashed journal per restart
        shutil.copytree(journal_dir, tmp_path / name)

    # Resume at the checkpoint of step 1 (sibling): group 1.0 reused whole, one sibling of
    # 1.1 kept, the other generated; every token spent was counted.
    resumed, spent = RolloutLedger.restore(None, 1, SIBLING, Journal(tmp_path / "sibling"))
    assert spent.generated_tokens == 7 * 3 and spent.prompt_tokens == 7 * 7
    resumed.open_step(1, [2, 6], [300, 400], G)
    requests = resumed.requests()
    assert [(r.group_id, r.slots, r.seed) for r in requests] == [("1.1", (1,), 401)]
    assert resumed.counts.reused_groups == 1
    assert resumed.counts.abandoned_attempts == 1  # 1.1's second sibling was dispatched, lost
    _generate(resumed)
    groups, scores = resumed.batch()
    assert scores[:3] == [0.0, 0.25, 0.5]  # the journaled rewards
    assert [len(g) for g in groups] == [G, G] and resumed.counts.batch_shortfall == 0

    # The same crash resumed with promptGroup granularity regenerates 1.1 whole.
    whole, _ = RolloutLedger.restore(None, 1, PROMPT_GROUP, Journal(tmp_path / "group"))
    whole.open_step(1, [2, 6], [300, 400], G)
    assert [(r.group_id, r.slots, r.seed) for r in whole.requests()] == [("1.1", (0, 1), 400)]
    assert whole.counts.abandoned_attempts >= 2  # the lost dispatch and the sealed sibling

    # Resumed from the checkpoint of step 0 instead: weights-1 completions are newer than the
    # restored weights, never reused (and moved aside so they never will be).
    journal_dir = tmp_path / "older"
    older, spent_older = RolloutLedger.restore(None, 0, SIBLING, Journal(journal_dir))
    older.open_step(0, [4, 9], [100, 200], G)
    assert older.counts.reused_groups == 2  # weights-0 completions match exactly
    older.close_step()
    older.open_step(1, [2, 6], [300, 400], G)
    assert len(older.requests()) == 2 and older.counts.reused_groups == 2
    assert not list(journal_dir.glob("w1-*.jsonl"))
    assert list((journal_dir / "discarded").glob("w1-*.jsonl"))
    # No checkpoint accounted for anything: every sealed token counts; the three weights-1
    # completions and the lost dispatch are abandoned work.
    assert spent_older.generated_tokens == 7 * 3
    assert older.counts.abandoned_attempts == 4


def test_a_checkpointed_state_with_sealed_groups_restores_through_the_journal(tmp_path):
    journal = Journal(tmp_path / "rollouts")
    ledger = RolloutLedger(PROMPT_GROUP, journal)
    ledger.open_step(2, [1, 3], [10, 20], G)
    _generate(ledger)  # all sealed, then the step is abandoned (SIGTERM) and checkpointed
    state = ledger.state(journal.sizes())
    assert [g.state for g in state.groups] == ["sealed", "sealed"]

    resumed, spent = RolloutLedger.restore(state, 2, PROMPT_GROUP, Journal(tmp_path / "rollouts"))
    assert spent.generated_tokens == 0  # the checkpoint's ledger includes them
    resumed.open_step(2, [1, 3], [10, 20], G)
    assert resumed.requests() == [] and resumed.counts.reused_groups == 2
    with pytest.raises(LedgerStateError, match="weight version 2 in the checkpoint of step 3"):
        RolloutLedger.restore(state, 3, PROMPT_GROUP, journal)


def test_dynamic_samplings_later_rounds_are_journaled_and_reused_at_their_positions(tmp_path):
    """A second generation round adds groups at the next positions (0.2, 0.3); a restart
    takes them over when the resumed step reaches that round again, and abandons them at the
    step's end when it does not."""
    journal_dir = tmp_path / "rollouts"
    first = RolloutLedger(SIBLING, Journal(journal_dir))
    first.open_step(0, [4, 9], [100, 200], G)
    _generate(first)
    first.add_groups([5, 7], [500, 600], G)
    assert [r.group_id for r in first.requests()] == ["0.2", "0.3"]
    _generate(first, fail_after=3)  # 0.2 whole, one sibling of 0.3, then the crash
    assert list(first.group_scores()) == ["0.0", "0.1", "0.2"]  # sealed groups only
    first.journal.close()
    shutil.copytree(journal_dir, tmp_path / "unreached")

    resumed, _ = RolloutLedger.restore(None, 0, SIBLING, Journal(journal_dir))
    resumed.open_step(0, [4, 9], [100, 200], G)
    resumed.add_groups([5, 7], [500, 600], G)
    assert [(r.group_id, r.slots, r.seed) for r in resumed.requests()] == [("0.3", (1,), 601)]
    assert resumed.counts.reused_groups == 3
    _generate(resumed)
    groups, scores = resumed.batch(["0.2", "0.0"])  # the chosen groups, in the chosen order
    assert [len(g) for g in groups] == [G, G] and scores[G:] == [0.0, 0.25]

    # Resumed where the step no longer takes a second round: those groups are abandoned when
    # the step closes (a sealed sibling of 0.3 and 0.2's two: three attempts).
    unreached, _ = RolloutLedger.restore(None, 0, SIBLING, Journal(tmp_path / "unreached"))
    unreached.open_step(0, [4, 9], [100, 200], G)
    before = unreached.counts.abandoned_attempts
    unreached.close_step()
    assert unreached.counts.abandoned_attempts - before == 3
