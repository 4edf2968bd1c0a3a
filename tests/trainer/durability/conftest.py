"""In-process attempts of a run on the session's shared vLLM engine (``tests/trainer/conftest``).

``run_attempt(run_dir, reward=..., **options)`` runs ``grpo_trainer.attempt.run_attempt`` —
the code behind ``python -m grpo_trainer run`` — with a contract ``RunConfig``, fresh learner
ranks, and the reports captured. Exceptions (injected crashes) propagate to the test.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from grpo_operator.api.report import Report, parse_report
from grpo_operator.api.run_config import ResumeMode, RunConfig, RunIdentity, RunPaths
from grpo_operator.api.spec import GRPORunSpec
from grpo_trainer import toy
from grpo_trainer.reporting import Reporter, parse_report_line
from grpo_trainer.rewards.char_fraction import CharFractionReward
from grpo_trainer.signals import StopRequest


@dataclass
class Outcome:
    code: int
    reports: list[Report]
    run_dir: Path
    steps: list  # the StepMetrics of the steps this attempt ran

    @property
    def last(self) -> Report:
        return self.reports[-1]


class ScriptedReward:
    """The dense toy reward, doing ``action`` at its ``at``-th call (1-based)."""

    def __init__(self, at: int | None = None, action: Callable[[], None] | None = None):
        self.at, self.action, self.calls = at, action, 0
        self.base = CharFractionReward()

    def __call__(self, text: str, truth: str) -> float:
        self.calls += 1
        if self.calls == self.at and self.action is not None:
            self.action()
        return self.base(text, truth)


def crash() -> None:
    raise RuntimeError("injected crash")


def sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def make_config(tiny_dirs, run_dir: Path, *, attempt: int = 1, resume: ResumeMode = ResumeMode.NONE,
                data_dir: Path | None = None, spec_patch: dict | None = None,
                **algorithm) -> RunConfig:
    data = data_dir or tiny_dirs["data"]
    doc = toy.tiny_spec(tiny_dirs["model"], data, run_dir.parent, **algorithm)
    for section, values in (spec_patch or {}).items():
        doc[section] = {**doc.get(section, {}), **values}
    validation = doc["dataset"].get("validationFile")
    return RunConfig(
        run=RunIdentity(name="tiny", namespace="default", uid=run_dir.name),
        attempt=attempt,
        resume=resume,
        paths=RunPaths(model_dir=str(tiny_dirs["model"]), data_dir=str(data),
                       train_file=str(data / "train.parquet"), checkpoint_dir=str(run_dir),
                       validation_file=str(data / validation) if validation else None),
        report_config_map="tiny-report",
        spec=GRPORunSpec.model_validate(doc),
    )


def _set_env(_actor, env: dict[str, str]) -> None:
    os.environ.update(env)


@pytest.fixture
def run_attempt(tiny_dirs, engines) -> Callable[..., Outcome]:
    """``run_attempt(run_dir, reward=None, handle_sigterm=False, learner_env=None,
    prepare=None, **config options)``: ``learner_env`` is set in the learner ranks' processes
    before the trainer connects them to the engine (as a pod's env would be); ``prepare(trainer)``
    runs on the trainer before the attempt trains."""
    import ray
    from transformers import AutoTokenizer

    from grpo_trainer.attempt import run_attempt as attempt_main
    from grpo_trainer.data import load_prompts
    from grpo_trainer.evaluation import Evaluator
    from grpo_trainer.learner.actor import LearnerSettings
    from grpo_trainer.learner.group import LearnerGroup
    from grpo_trainer.placement import Slot
    from grpo_trainer.trainer import Trainer, TrainerConfig

    def run(run_dir: Path, reward=None, handle_sigterm: bool = False,
            learner_env: dict[str, str] | None = None,
            prepare: Callable[[Trainer], None] | None = None, **options) -> Outcome:
        config = make_config(tiny_dirs, run_dir, **options)
        spec = config.spec
        reward_fn = reward or ScriptedReward()

        steps = []

        @contextlib.contextmanager
        def start(**trainer_options):
            trainer_options["after_step"] = [*trainer_options["after_step"],
                                             lambda trainer, metrics: steps.append(metrics)]
            settings = TrainerConfig.from_spec(spec)
            tokenizer = AutoTokenizer.from_pretrained(config.paths.model_dir)
            dataset = load_prompts(config.paths.train_file, tokenizer,
                                   spec.algorithm.max_prompt_tokens)
            evaluator = None
            if config.paths.validation_file is not None:
                evaluator = Evaluator.for_spec(spec, load_prompts(
                    config.paths.validation_file, tokenizer, spec.algorithm.max_prompt_tokens),
                    reward_fn)
            learners = LearnerGroup(
                LearnerSettings.from_spec(spec, config.paths.model_dir, settings.algorithm),
                (Slot(1, 0.5),), None)
            try:
                if learner_env:
                    ray.get([rank.__ray_call__.remote(_set_env, learner_env)
                             for rank in learners.ranks])
                trainer = Trainer(settings, dataset, reward_fn, engines, learners,
                                  tokenizer.pad_token_id, evaluator=evaluator,
                                  **trainer_options)
                if prepare is not None:
                    prepare(trainer)
                yield trainer
            finally:
                learners.shutdown()

        stream = io.StringIO()
        stop = StopRequest()
        with stop.installed() if handle_sigterm else contextlib.nullcontext():
            code = attempt_main(config, start, Reporter(config.attempt, stream), stop)
        reports = [parse_report(found[0]) for line in stream.getvalue().splitlines()
                   if (found := parse_report_line(line))]
        return Outcome(int(code), reports, run_dir, steps)

    return run
