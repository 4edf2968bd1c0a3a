"""Rollout recovery on the real engine: a crash in the middle of a step, resumed with each
recovery granularity, reuses exactly the journaled work the granularity allows."""

from __future__ import annotations

import shutil

import pytest

from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.run_config import ResumeMode
from grpo_trainer.journal.journal import Journal

from .conftest import ScriptedReward, crash

STEP = 4 * 4  # completions per step
OPTIONS = {"maxSteps": 2, "spec_patch": {"checkpoint": {"intervalSteps": 1}}}


def _seals(run_dir, version: int) -> dict[str, list]:
    """Sealed journal records of weight ``version``, by segment name."""
    journal = Journal(run_dir / "rollouts")
    return {s.name: [r for _, r in Journal.read(s) if r.kind == "seal"]
            for s in journal.segments() if s.weight_version == version and not s.discarded}


@pytest.mark.parametrize(
    ("granularity", "generated_again", "abandoned"),
    [
        # 2 groups reused whole; group 2 keeps its 2 sealed siblings and gets 2 new ones;
        # group 3 is generated: 6 completions. Abandoned: the 6 dispatched, never sealed.
        ("sibling", 6, 6),
        # Group 2 is regenerated whole (its 2 sealed siblings abandoned too): 8 completions.
        ("promptGroup", 8, 8),
    ],
)
def test_crash_mid_step_reuses_sealed_groups(run_attempt, tmp_path_factory, granularity,
                                             generated_again, abandoned):
    crashed = tmp_path_factory.getbasetemp() / "crashed-mid-step"
    if not crashed.exists():
        # Step 2 dies at its 11th reward: groups 0 and 1 and two siblings of group 2 are
        # sealed and journaled (weight version 1, that of the step-1 checkpoint).
        with pytest.raises(RuntimeError, match="injected crash"):
            run_attempt(crashed, reward=ScriptedReward(at=STEP + 11, action=crash), **OPTIONS)
    before = _seals(crashed, 1)
    assert sum(len(records) for records in before.values()) == 10

    run_dir = tmp_path_factory.mktemp(granularity) / crashed.name
    shutil.copytree(crashed, run_dir)
    resumed = run_attempt(run_dir, attempt=2, resume=ResumeMode.LATEST,
                          spec_patch={**OPTIONS["spec_patch"],
                                      "runPolicy": {"recoveryGranularity": granularity}},
                          maxSteps=2)
    assert resumed.code == ExitCode.SUCCESS
    reuse = resumed.last.recovery.rollout
    assert reuse.reused_groups == 2
    assert reuse.abandoned_attempts == abandoned
    assert reuse.sealed_groups == 4 + 2  # cumulative: step 1's, then step 2's groups 2 and 3
    after = _seals(run_dir, 1)
    new = [r for name, records in after.items() if name not in before for r in records]
    assert len(new) == generated_again
    # The step trained on the journaled rewards of the reused groups (scores are float32),
    # and on the regenerated rest: a whole step, nothing gone without.
    [step2] = resumed.steps
    assert len(step2.scores) == STEP
    assert reuse.batch_shortfall == 0
    old = [r for records in before.values() for r in records]
    reused = 10 if granularity == "sibling" else 8
    assert list(step2.scores[:reused]) == pytest.approx([r.reward for r in old[:reused]])
    if granularity == "sibling":  # only the missing siblings of group 2 were generated
        assert sorted((r.group, r.slot) for r in new[:2]) == [("1.2", 2), ("1.2", 3)]
