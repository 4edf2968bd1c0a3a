"""This trainer's side of the trainer benchmark; runs in .venv, one subprocess per command.

``prepare`` makes an experiment's model and dataset with ``grpo_trainer.toy`` (offline);
``train`` runs the trainer as ``python -m grpo_trainer run`` does (``run_attempt``: frozen
inputs, rollout journal, reports; its checkpoint written once the timed steps are done) on a
local Ray with one vLLM engine and one learner rank, timing every step from an after-step hook.
Results go to the ``--out`` JSON file; ``[bench]`` lines on stdout are progress.

    PYTHONPATH=hack .venv/bin/python -m bench.trainer_side prepare --experiment tiny --workdir D
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import time
from pathlib import Path

from bench.experiment import Experiment, by_name

MODEL, DATA, TRAIN_FILE = "model", "data", "train.parquet"
PREPARED = "prepare.json"  # ``prepare``'s output in the workdir; the TRL side reads it


def prepare(exp: Experiment, workdir: Path) -> dict:
    """The model, the dataset and the rendered prompts (token ids, for the TRL side to check
    that it feeds the same tokens)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_trainer import toy
    from grpo_trainer.data import load_prompts

    model_dir = toy.make_tiny_model(workdir / MODEL, seed=exp.seed, hidden_size=exp.hidden_size,
                                    num_layers=exp.num_layers, vocab_size=exp.vocab_size)
    toy.make_letters_dataset(workdir / DATA, train=exp.train_rows, seed=exp.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dataset = load_prompts(workdir / DATA / TRAIN_FILE, tokenizer, exp.max_prompt_tokens)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "prompt_ids": [list(row.prompt_ids) for row in dataset.rows],
        "dropped_prompts": dataset.dropped_too_long,
    }


def train(exp: Experiment, workdir: Path, learner_ranks: int | None = None) -> dict:
    """Run the experiment through ``run_attempt``; per-step metrics, hook-to-hook cycle times
    and what the learner ranks run with. ``learner_ranks``: that many CPU ranks instead of the
    placement's one (each with its share of the step's sequences; a micro-batch no larger)."""
    import ray
    import torch

    from grpo_operator.api.run_config import ResumeMode, RunConfig, RunIdentity, RunPaths
    from grpo_operator.api.spec import GRPORunSpec
    from grpo_trainer import toy
    from grpo_trainer.attempt import run_attempt
    from grpo_trainer.reporting import Reporter
    from grpo_trainer.rewards.char_fraction import CharFractionReward
    from grpo_trainer.run import ray_session, start_run

    model_dir, data_dir, run_dir = workdir / MODEL, workdir / DATA, workdir / "checkpoints"
    raw = toy.tiny_spec(model_dir, data_dir, run_dir)
    raw["algorithm"] = exp.algorithm()
    if learner_ranks:
        per_rank = exp.sequences_per_step // learner_ranks
        raw["algorithm"]["microBatchSize"] = min(exp.micro_batch_size, per_rank)
    micro_batch = raw["algorithm"]["microBatchSize"]
    # No periodic checkpoint: TRL writes none, and this trainer writes one beside the next step's
    # generation, on the same cores, where no phase would show it apart. The attempt's final
    # checkpoint, after the timed steps, is written with the loop waiting: its cost, alone.
    raw["checkpoint"]["intervalSteps"] = exp.total_steps + 1
    spec = GRPORunSpec.model_validate(raw)
    config = RunConfig(
        run=RunIdentity(name=f"bench-{exp.name.lower()}", namespace="bench", uid="bench"),
        attempt=1,
        resume=ResumeMode.NONE,
        paths=RunPaths(model_dir=str(model_dir), data_dir=str(data_dir),
                       train_file=str(data_dir / TRAIN_FILE),
                       checkpoint_dir=str(run_dir / "bench")),
        report_config_map="bench-report",
        spec=spec,
    )
    steps: list[dict] = []
    learner: dict = {}

    def after_step(trainer, metrics) -> None:
        # Last hook: the previous mark to this one spans the step plus the checkpoint and the
        # reports of the hooks before this one.
        steps.append({**metrics.to_dict(), "mark": time.perf_counter()})
        print(f"[bench] this trainer: step {metrics.step}/{exp.total_steps} "
              f"{metrics.time_step_s:.2f} s", flush=True)

    @contextlib.contextmanager
    def start(**options):
        options["after_step"] = [*options["after_step"], after_step]
        with ray_session(_cpus_for(learner_ranks)), start_run(
                spec, str(model_dir), str(data_dir / TRAIN_FILE),
                reward_fn=CharFractionReward(), cpu_learner_ranks=learner_ranks,
                **options) as trainer:
            rank = trainer.learners.ranks[0]
            learner.update(ray.get(rank.__ray_call__.remote(_threads)))
            steps.append({"mark": time.perf_counter()})
            yield trainer

    # Defined here, with the trainer's imports: the TRL side imports this module in a venv
    # without the trainer.
    class CheckpointSeconds(Reporter):
        """Publishes as the trainer's reporter does, keeping the seconds the last checkpoint
        held the loop (its step's ``seconds.checkpoint``)."""

        checkpoint_s: float | None = None

        def publish(self, *args, **kwargs):
            report = super().publish(*args, **kwargs)
            if report.last_step is not None and report.last_step.seconds.checkpoint is not None:
                self.checkpoint_s = report.last_step.seconds.checkpoint
            return report

    reporter = CheckpointSeconds(config.attempt)
    code = run_attempt(config, start, reporter)
    if code != 0:
        raise SystemExit(f"the trainer exited with {code}")
    return {"steps": _cycles(steps), "learner": learner, "micro_batch": micro_batch,
            "torch": torch.__version__, "checkpoint_s": reporter.checkpoint_s}


def _cpus_for(learner_ranks: int | None) -> int | None:
    """A local Ray node's CPUs: enough for the engine's and the ranks' bundles, which may be more
    than the machine has (the ranks still split its cores, ``grpo_trainer.cores``; more ranks
    than cores oversubscribe them). None: the machine's."""
    from grpo_trainer.placement import CPU_ACTOR_SHARE

    if not learner_ranks:
        return None
    return max(os.cpu_count() or 1, math.ceil((learner_ranks + 1) * CPU_ACTOR_SHARE))


def _threads(_actor) -> dict:
    """Runs inside the learner actor (``__ray_call__``)."""
    import os

    import torch

    return {"torch_threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}


def _cycles(marks: list[dict]) -> list[dict]:
    """Each step's metrics with ``cycle_s``: time from the previous step's last hook (or the
    trainer's start) to its own, so ``cycle_s - time_step_s`` is what ran between the loop's
    steps (checkpoint, reports, the first sync)."""
    out = []
    for before, step in zip(marks, marks[1:], strict=False):
        out.append({**{k: v for k, v in step.items() if k != "mark"},
                    "cycle_s": step["mark"] - before["mark"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.trainer_side")
    parser.add_argument("command", choices=("prepare", "train"))
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--learner-ranks", type=int, help="train: CPU learner ranks")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # the driver's log, as in a pod
    exp = by_name(args.experiment)
    if args.command == "prepare":
        result = prepare(exp, args.workdir)
    else:
        result = train(exp, args.workdir, args.learner_ranks)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
