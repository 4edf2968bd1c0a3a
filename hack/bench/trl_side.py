"""TRL's side of the trainer benchmark; runs in .bench/trl-venv (``setup-trl-venv.sh``).

The experiment's settings come from ``bench.experiment`` (``Experiment.trl_config``), the
model and the dataset from the directory ``trainer_side prepare`` made, the reward is the
trainer's own ``CharFractionReward`` (PYTHONPATH carries ``trainer-image``). A callback times
each optimizer step (``on_step_begin`` to ``on_step_end``: generation, scoring, logprob passes,
forward/backward and the optimizer step); a subclass times, inside it, the call that prepares
the batch (generation, scoring, then the logprob passes), generation and scoring, and on the
vLLM path the weight sync (which TRL runs inside its generation call).
``--generation vllm`` asks for TRL's colocated vLLM path instead of ``model.generate``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import defaultdict
from pathlib import Path

from bench.experiment import Experiment, by_name
from bench.trainer_side import DATA, MODEL, PREPARED, TRAIN_FILE

# TRL's mean |engine logprob - learner logprob| per token on its vLLM path: the sync check.
LOGP_GAP = "sampling/sampling_logp_difference/mean"


def load_rows(workdir: Path) -> list[dict]:
    """The letters dataset as TRL wants it: conversational ``prompt`` plus the column the
    reward reads."""
    import pyarrow.parquet as pq

    table = pq.read_table(workdir / DATA / TRAIN_FILE).to_pylist()
    return [{"prompt": row["prompt"], "ground_truth": row["reward_model"]["ground_truth"]}
            for row in table]


def run(exp: Experiment, workdir: Path, generation: str) -> dict:
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpo_trainer.rewards.char_fraction import CharFractionReward

    rows = load_rows(workdir)
    tokenizer = AutoTokenizer.from_pretrained(workdir / MODEL)
    expected = json.loads((workdir / PREPARED).read_text())["prompt_ids"]
    rendered = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True,
                                              tokenize=True, return_dict=True)["input_ids"]
                for r in rows]
    if rendered != expected:
        raise SystemExit("TRL would tokenise the prompts differently from the trainer")

    per_step: dict[int, dict] = defaultdict(lambda: defaultdict(float))
    score = CharFractionReward()

    def char_fraction(completions, ground_truth, completion_ids, **_) -> list[float]:
        figures = per_step[trainer.state.global_step + 1]
        figures["generated_tokens"] += sum(len(ids) for ids in completion_ids)
        figures["completions"] += len(completion_ids)
        scores = [score(c[0]["content"], truth) for c, truth in zip(completions, ground_truth,
                                                                   strict=True)]
        figures["reward_sum"] += sum(scores)
        return scores

    @contextlib.contextmanager
    def timing(figure: str):
        """Adds the block's seconds to the current step's ``figure``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            per_step[trainer.state.global_step + 1][figure] += time.perf_counter() - start

    class TimedGRPOTrainer(GRPOTrainer):
        def _generate_single_turn(self, *args, **kwargs):
            with timing("generate_s"):
                return super()._generate_single_turn(*args, **kwargs)

        def _generate_and_score_completions(self, *args, **kwargs):
            # Generation, scoring, then the reference's and the old policy's no-grad passes.
            with timing("prepare_s"):
                return super()._generate_and_score_completions(*args, **kwargs)

        def _calculate_rewards(self, *args, **kwargs):
            with timing("reward_s"):
                return super()._calculate_rewards(*args, **kwargs)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            seconds = time.perf_counter() - self.start
            per_step[state.global_step]["step_s"] = seconds
            print(f"[bench] TRL ({generation}): step {state.global_step}/{exp.total_steps} "
                  f"{seconds:.2f} s", flush=True)

    vllm = {}
    if generation == "vllm":
        vllm = {"use_vllm": True, "vllm_mode": "colocate",
                "vllm_max_model_length": exp.max_prompt_tokens + exp.max_response_tokens}
    config = GRPOConfig(
        output_dir=str(workdir / f"trl-{generation}"),
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        **exp.trl_config(),
        **vllm,
    )
    model = AutoModelForCausalLM.from_pretrained(workdir / MODEL, dtype=torch.float32)
    trainer = TimedGRPOTrainer(
        model=model,
        reward_funcs=char_fraction,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    if generation == "vllm":  # the sync runs inside _generate_single_turn: time it apart
        sync = trainer.vllm_generation.sync_weights

        def timed_sync():
            with timing("sync_s"):
                sync()

        trainer.vllm_generation.sync_weights = timed_sync
    trainer.train()
    for entry in trainer.state.log_history:
        if "step" in entry and LOGP_GAP in entry:
            per_step[entry["step"]]["logp_gap"] = entry[LOGP_GAP]
    steps = [{"step": step, **figures} for step, figures in sorted(per_step.items())]
    return {
        "steps": steps,
        "torch_threads": torch.get_num_threads(),
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                     "torch": torch.__version__},
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.trl_side")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--generation", choices=("transformers", "vllm"), default="transformers")
    args = parser.parse_args()
    result = run(by_name(args.experiment), args.workdir, args.generation)
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
