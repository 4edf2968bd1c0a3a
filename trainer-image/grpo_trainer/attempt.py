"""One attempt of a run, durable: inputs → restore → admit → train with checkpoints → seal.

1. **Frozen inputs**: digests of the model and the dataset recorded (and checked against the
   spec's and an earlier attempt's) before anything else, and reported; checked again at the
   end (``frozen_inputs``).
2. **Restore** (``resume: latest``): the newest checkpoint whose manifest verifies, its cost
   ledger and rollout-ledger state, then the journal: completions of the restored weight
   version are reused, newer ones discarded, tokens spent since the checkpoint counted.
3. **Admit** the plan, its evaluations included, against the token budget before any
   generation (``api.token_budget``; the validation file's row count bounds an evaluation).
4. **Train**: a checkpoint every ``checkpoint.intervalSteps`` steps, written while the next
   step generates and announced once sealed (``checkpoint_writer``), an evaluation when one is
   due (``evaluation``); gates stop the run at the budget or on SIGTERM (``signals``), both
   with a checkpoint. A weight sync that leaves engine
   parameters without a value fails the run (exit 15); a step whose engine logprobs disagree
   with the learners' ends the attempt untrained (exit 16, retryable: resume from the last
   checkpoint, the refused step's journaled rollouts discarded).
5. **End**: a checkpoint of the last step, the frozen inputs verified, the artifact copied from
   that checkpoint's ``model/`` and sealed; its manifest digest is the artifact digest.

Checkpoint contents (``step_N/``, sealed by ``checkpoint.CheckpointStore``): ``model/`` (HF
directory), ``learner/rank_<r>.pt`` (optimizer + RNG per rank), ``trainer.json`` (step, sampler,
driver RNG), ``ledgers.json`` (``cost``: the report's ledger; ``rollout``: the rollout-ledger
state, validated strictly on load), ``run-config.json`` (the attempt's run config, a record).
Beside the checkpoints: the rollout journal and the TensorBoard event files (``board``); W&B
and MLflow get the same records when the environment asks for them (``trackers``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_operator.api.checkpoint_layout import ARTIFACT_DIR, TMP_SUFFIX, complete_steps
from grpo_operator.api.constants import Reason, TrainerActivity
from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.run_config import ResumeMode, RunConfig
from grpo_operator.api.status import TrainerLedger
from grpo_operator.api.token_budget import TokenBudget
from grpo_trainer.board import TrainingBoard
from grpo_trainer.checkpoint import CheckpointStore, SavedCheckpoint, copy_sealed_model
from grpo_trainer.checkpoint_writer import CheckpointWriter
from grpo_trainer.data import DatasetError, count_rows
from grpo_trainer.frozen_inputs import FrozenInputChangedError, FrozenInputs, MissingInputError
from grpo_trainer.journal.journal import Journal
from grpo_trainer.journal.ledger import RolloutLedger
from grpo_trainer.journal.state import LedgerState, LedgerStateError
from grpo_trainer.progress import RunProgress, replace_dir
from grpo_trainer.reporting import Reporter
from grpo_trainer.rewards.python_reward import RewardLoadError
from grpo_trainer.signals import StopRequest
from grpo_trainer.sync_errors import WeightSyncIncompleteError, WeightSyncMismatchError
from grpo_trainer.trackers import Sinks, TrackerUnavailableError, enabled_trackers

log = logging.getLogger(__name__)

TRAINER_FILE = "trainer.json"
LEDGERS_FILE = "ledgers.json"
RUN_CONFIG_FILE = "run-config.json"  # the attempt's config, for the record (never read back)

StartTrainer = Callable[..., contextlib.AbstractContextManager]
"""``start(rollouts=, gates=, after_step=, on_tokens=, interrupt=)`` -> a context yielding a
``Trainer`` (``run.start_run`` on a cluster; tests pass one on shared engines)."""


class CheckpointContentError(ValueError):
    """A checkpoint that verifies but whose state cannot be loaded."""


def run_attempt(config: RunConfig, start: StartTrainer, reporter: Reporter,
                stop: StopRequest | None = None) -> ExitCode:
    """Run one attempt; the exit code (the caller announces it)."""
    spec = config.spec
    stop = StopRequest() if stop is None else stop  # (an unset StopRequest is falsy)
    progress = RunProgress(reporter, spec.algorithm.max_steps)
    progress.doing(TrainerActivity.VERIFYING_INPUTS)

    # 1. Frozen inputs, before anything reads them.
    frozen = FrozenInputs.from_config(config)
    try:
        progress.recovery.inputs = frozen.record()
    except MissingInputError as err:
        return _fail(progress, Reason.INVALID_INPUT, str(err), ExitCode.INVALID_INPUT)
    except FrozenInputChangedError as err:
        return _fail(progress, Reason.FROZEN_INPUT_CHANGED, str(err),
                     ExitCode.FROZEN_INPUT_CHANGED)

    # 2. Restore the newest verified checkpoint and the journal.
    store = CheckpointStore(Path(config.paths.checkpoint_dir), spec.checkpoint.keep)
    journal = Journal(Path(store.layout.journal_dir))
    progress.doing(TrainerActivity.RESTORING_CHECKPOINT)
    try:
        checkpoint, trainer_state, rollouts = _restore(config, store, journal, progress)
    except CheckpointContentError as err:
        return _fail(progress, Reason.INVALID_INPUT, str(err), ExitCode.INVALID_INPUT)
    step = checkpoint.step if checkpoint else 0

    # 3. Admit the plan before any generation.
    try:
        budget = TokenBudget.of(spec, _eval_prompts(config))
    except DatasetError as err:
        return _fail(progress, Reason.INVALID_INPUT, f"invalid dataset: {err}",
                     ExitCode.INVALID_INPUT)
    refusal = budget.refuse_plan(progress.ledger.budget_tokens, step)
    if refusal:
        return _fail(progress, Reason.BUDGET_EXHAUSTED, refusal, ExitCode.BUDGET_EXHAUSTED)

    # 4. Train; the board writes TensorBoard's records, and W&B's and MLflow's if the env asks.
    try:
        trackers = enabled_trackers(config)
    except TrackerUnavailableError as err:
        return _fail(progress, Reason.INVALID_INPUT, str(err), ExitCode.INVALID_INPUT)
    board = Sinks(TrainingBoard(Path(store.layout.tensorboard_dir), first_step=step + 1),
                  trackers)

    writer = CheckpointWriter(store, announce=progress.sealed)

    def write_checkpoint(trainer, sealed: bool) -> None:
        """Hand the step's checkpoint off (``sealed``: and wait until it is sealed); the time
        it held the loop is the step's checkpoint figure."""
        began = time.perf_counter()
        wrote = writer.hand_off(
            trainer.step, lambda directory: _write(directory, config, trainer, progress, journal))
        if sealed:
            writer.wait()
        if wrote:
            held = time.perf_counter() - began
            progress.checkpoint_held(trainer.step, held)
            board.checkpointed(trainer.step, held)
        _prune_journal(store, journal)

    def periodic(trainer, metrics) -> None:
        if trainer.step % spec.checkpoint.interval_steps == 0:
            write_checkpoint(trainer, sealed=False)  # written while the next step generates

    gates = [
        lambda t: "SIGTERM received" if stop else None,
        lambda t: budget.refuse_step(progress.ledger.budget_tokens, t.step),
    ]
    # With the checkpoint resumed from, if any: the report that says where this attempt starts.
    progress.doing(TrainerActivity.STARTING_ENGINES)
    try:
        with start(rollouts=rollouts, gates=gates, on_tokens=progress.add_tokens,
                   interrupt=lambda: bool(stop),
                   after_step=[progress.record_step,
                               lambda t, metrics: board.record(metrics, progress.last_step),
                               periodic, progress.running]) as trainer:
            if checkpoint is not None:
                trainer.learners.load_state(str(checkpoint.path))
                trainer.load_state_dict(trainer_state)
            progress.doing(TrainerActivity.TRAINING)
            try:
                trainer.train()
                progress.doing(TrainerActivity.CHECKPOINTING)
                write_checkpoint(trainer, sealed=True)
                final = writer.newest
            finally:  # before the learners stop, and before any terminal report
                writer.close()
    except DatasetError as err:
        return _fail(progress, Reason.INVALID_INPUT, f"invalid dataset: {err}",
                     ExitCode.INVALID_INPUT)
    except RewardLoadError as err:
        return _fail(progress, Reason.INVALID_INPUT, f"invalid reward: {err}",
                     ExitCode.INVALID_INPUT)
    except WeightSyncIncompleteError as err:
        return _fail(progress, Reason.WEIGHT_SYNC_INCOMPLETE, str(err),
                     ExitCode.WEIGHT_SYNC_INCOMPLETE)
    except WeightSyncMismatchError as err:
        # The refused step's rollouts (weight version step - 1) came from other weights than
        # their version says: never reuse them, or the next attempt would refuse them again.
        # Their tokens still count (discarded segments stay in the cost ledger).
        journal.discard_newer_than(err.step - 2)
        log.error("%s: %s", Reason.WEIGHT_SYNC_MISMATCH, err)
        progress.failed_retryably(Reason.WEIGHT_SYNC_MISMATCH, str(err))
        return ExitCode.WEIGHT_SYNC_MISMATCH
    finally:
        journal.close()
        board.close()
    if trainer.stopped and stop:
        progress.suspended()
        log.warning("suspended at step %d (checkpoint %s)", final.step, final.path)
        return ExitCode.SUSPENDED
    if trainer.stopped:
        return _fail(progress, Reason.BUDGET_EXHAUSTED,
                     f"stopped at step {final.step}: {trainer.stopped}",
                     ExitCode.BUDGET_EXHAUSTED)

    # 5. The inputs must not have changed; then the artifact, sealed.
    progress.doing(TrainerActivity.VERIFYING_INPUTS)
    try:
        frozen.verify()
    except FrozenInputChangedError as err:
        return _fail(progress, Reason.FROZEN_INPUT_CHANGED, str(err),
                     ExitCode.FROZEN_INPUT_CHANGED)
    artifact = store.root / ARTIFACT_DIR
    staging = artifact.with_name(ARTIFACT_DIR + TMP_SUFFIX)
    progress.doing(TrainerActivity.SEALING_ARTIFACT)
    copy_sealed_model(final.path, staging)
    replace_dir(staging, artifact)
    terminal = progress.succeeded(artifact, final.step)
    log.info("done: %d steps, final model in %s (sha256 %s)", final.step, artifact,
             terminal.artifact.sha256)
    return ExitCode.SUCCESS


def _fail(progress: RunProgress, reason: Reason, message: str, code: ExitCode) -> ExitCode:
    log.error("%s: %s", reason, message)
    progress.failed(reason, message)
    return code


def _restore(config: RunConfig, store: CheckpointStore, journal: Journal,
             progress: RunProgress) -> tuple[SavedCheckpoint | None, Any, RolloutLedger]:
    """The checkpoint to resume from (None: step 0), its trainer state, the rollout ledger;
    ``progress`` gets the checkpoint's ledger plus the tokens spent after it."""
    spec = config.spec
    granularity = spec.run_policy.recovery_granularity.value
    checkpoint = store.newest_valid() if config.resume == ResumeMode.LATEST else None
    trainer_state, state = None, None
    if checkpoint is not None:
        store.drop_newer_than(checkpoint.step)
        try:
            trainer_state = json.loads((checkpoint.path / TRAINER_FILE).read_text())
            ledgers = json.loads((checkpoint.path / LEDGERS_FILE).read_text())
            cost = TrainerLedger.model_validate(ledgers["cost"])
            state = LedgerState.load(json.dumps(ledgers["rollout"]))
        except (OSError, KeyError, ValueError, LedgerStateError) as err:
            raise CheckpointContentError(
                f"checkpoint {checkpoint.path} verifies but cannot be loaded: {err}") from None
        progress.ledger = cost.model_copy(update={"planned_steps": spec.algorithm.max_steps})
        progress.recovery.resumed_from_step = checkpoint.step
        progress.checkpointed(checkpoint.step, checkpoint.path, checkpoint.sha256,
                              checkpoint.time)
        log.info("resuming from checkpoint step %d (%s)", checkpoint.step, checkpoint.path)
    step = checkpoint.step if checkpoint else 0
    try:
        rollouts, spent = RolloutLedger.restore(state, step, granularity, journal)
    except LedgerStateError as err:
        raise CheckpointContentError(str(err)) from None
    progress.add_spent(spent)
    progress.rollouts = rollouts
    return checkpoint, trainer_state, rollouts


def _eval_prompts(config: RunConfig) -> int | None:
    """The most prompts an evaluation scores (None: the run has no validation file)."""
    path = config.paths.validation_file
    if path is None:
        return None
    rows = count_rows(path)
    cap = config.spec.algorithm.eval_max_prompts
    return rows if cap is None else min(rows, cap)


def _write(directory: Path, config: RunConfig, trainer, progress: RunProgress,
           journal: Journal) -> Callable[[], None]:
    """A checkpoint's contents (see the module docstring): the driver's written now, the
    learner ranks' by the ranks; returns the wait for theirs."""
    ranks_written = trainer.learners.begin_save_state(str(directory))
    (directory / RUN_CONFIG_FILE).write_text(config.to_json())
    (directory / TRAINER_FILE).write_text(json.dumps(trainer.state_dict()))
    cost = progress.ledger.model_copy(update={"completed_steps": trainer.step})
    rollout = trainer.rollouts.state(journal.sizes())
    (directory / LEDGERS_FILE).write_text(json.dumps({
        "cost": cost.model_dump(mode="json", by_alias=True, exclude_none=True),
        "rollout": json.loads(rollout.model_dump_json()),
    }))
    return ranks_written


def _prune_journal(store: CheckpointStore, journal: Journal) -> None:
    """Drop journal segments that the oldest kept checkpoint fully accounts for and that no
    kept checkpoint can reuse."""
    kept = complete_steps(store.root)
    if not kept:
        return
    try:
        ledgers = json.loads((store.step_dir(kept[0]) / LEDGERS_FILE).read_text())
        accounted = ledgers["rollout"]["journal_accounted"]
    except (OSError, KeyError, ValueError):
        return
    journal.prune(accounted, kept[0])
