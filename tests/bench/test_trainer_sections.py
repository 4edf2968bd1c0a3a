"""The trainer benchmark's sections from raw results: medians over the timed steps only,
ratios trainer ÷ TRL, and a failed TRL path reported with its error."""

from __future__ import annotations

from bench import trainer_sections
from bench.experiment import by_name
from bench.tables import rate, seconds

CONTEXT = {"trl_version": "1.13.0", "torch_version": "2.13.0", "transformers_version": "5.19.0",
           "runtime_s": 600.0, "cores": 2, "load_before": "1.0",
           "load_after": "2.0"}


def _ours_step(step: int, step_s: float) -> dict:
    return {"step": step, "generated_tokens": 1000, "reward_mean": 0.25, "time_step_s": step_s,
            "time_generate_s": step_s / 2, "time_reward_s": 0.0, "time_learn_s": step_s / 4,
            "time_ref_logprobs_s": step_s / 16, "time_old_logprobs_s": None,
            "time_update_s": step_s / 8, "time_sync_s": step_s / 8, "cycle_s": step_s + 0.5,
            "logprob_mismatch": 1e-6}


def _trl_step(step: int, step_s: float, sync: bool) -> dict:
    figures = {"step": step, "generated_tokens": 1000.0, "completions": 10.0,
               "reward_sum": 1.0, "generate_s": step_s / 2, "reward_s": 0.0,
               "prepare_s": step_s * 3 / 4, "step_s": step_s}
    return {**figures, "sync_s": step_s / 10, "logp_gap": 1e-3} if sync else figures


RAN = object()


def _entry(trl_vllm=RAN) -> dict:
    exp = by_name("tiny")
    warm, timed = 100.0, [2.0, 2.0, 4.0, 2.0, 2.0]  # the warm-up step must not count
    if trl_vllm is RAN:
        trl_vllm = {"steps": [_trl_step(i + 1, s, True) for i, s in enumerate([warm, *timed])],
                    "other_work_cores": 0.0}
    return {
        "experiment": exp.to_dict(),
        "parameters": 430_720,
        "ours": {"steps": [_ours_step(i + 1, s) for i, s in enumerate([warm, *timed])],
                 "learner": {"torch_threads": 1, "OMP_NUM_THREADS": "1"}, "micro_batch": 16,
                 "other_work_cores": 0.25, "checkpoint_s": 1.25},
        "widths": [41] * 6,
        "trl": {"steps": [_trl_step(i + 1, s / 4, False) for i, s in enumerate([warm, *timed])],
                "torch_threads": 2, "other_work_cores": 1.5},
        "trl_vllm": trl_vllm,
        "engine": {"rounds": [{"seconds": 9.0, "generated_tokens": 1000}]
                   + [{"seconds": 0.5, "generated_tokens": 1000}] * 5, "other_work_cores": 1.0},
        "engine_cores": {"trainer": "0", "standalone": "0"},
        "bare": {"tokens": 64 * 41, "logprob_passes_s": [1.0] + [0.1] * 5,
                 "update_s": [1.0] + [0.1625] * 5, "torch_threads": 2,
                 "other_work_cores": 0.5},
    }


def _rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ")][2:]


def test_comparison_reports_medians_of_timed_steps_and_trainer_over_trl_ratios():
    section = trainer_sections.comparison([_entry()], CONTEXT)
    assert section.startswith("## Trainer vs TRL")
    ours, trl_hf, trl_vllm = _rows(section)
    assert ours[2:] == ["this trainer", "2.00 (2.00)", "500 (500)", "1,000 (1,000)", "0.250",
                        "–", "–", "0.2"]
    assert trl_hf[2:] == ["TRL, `model.generate`", "0.500 (0.500)", "2,000 (2,000)",
                          "4,000 (4,000)", "0.100", "4.00× (4.00×)", "0.25× (0.25×)", "1.5"]
    # The vLLM path's sync is taken out of its generation time.
    assert trl_vllm[2:] == ["TRL, vLLM colocate", "2.00 (2.00)", "500 (500)", "1,250 (1,250)",
                            "0.100", "1.00× (1.00×)", "1.00× (1.00×)", "0.0"]
    assert "5 timed steps" in section and "1.0e-03 on TRL's vLLM path" in section


def test_median_and_best_each_way():
    assert trainer_sections.both([3.0, 1.0, 2.0], seconds, higher_is_better=False) == \
        "2.00 (1.00)"
    assert trainer_sections.both([3.0, 1.0, 2.0], rate, higher_is_better=True) == "2 (3)"
    # Medians against medians, best against best.
    assert trainer_sections.both_ratios([2.0, 4.0, 3.0], [1.0, 1.0, 3.0], False) == \
        "3.00× (2.00×)"


def test_a_failed_trl_path_is_named_with_its_error_and_left_out_of_the_tables():
    results = [_entry(trl_vllm={"error": "RuntimeError: no engine"})]
    comparison = trainer_sections.comparison(results, CONTEXT)
    assert "It failed on tiny: `RuntimeError: no engine`" in comparison
    assert [row[2] for row in _rows(comparison)] == ["this trainer", "TRL, `model.generate`"]
    assert len(_rows(trainer_sections.split(results))) == 2


def test_a_trl_path_that_did_not_run_is_left_out():
    results = [_entry(), {**_entry(trl_vllm=None), "experiment": by_name("25M").to_dict()}]
    comparison = trainer_sections.comparison(results, CONTEXT)
    assert "ran on tiny only" in comparison
    assert [row[2] for row in _rows(comparison)] == [
        "this trainer", "TRL, `model.generate`", "TRL, vLLM colocate",
        "this trainer", "TRL, `model.generate`"]


def test_split_shares_add_up_and_checkpoint_is_outside_the_step():
    ours, trl_hf, trl_vllm = _rows(trainer_sections.split([_entry()]))
    # generate, reward, logprob passes, update, learner calls' rest, sync, other, after; the
    # checkpoint, written once after the timed steps, apart.
    assert ours[1:] == ["this trainer", "2.00", "1.00 (50%)", "0.000 (0%)", "0.125 (6%)",
                        "0.250 (12%)", "0.125 (6%)", "0.250 (12%)", "0.250 (12%)",
                        "0.500 (25%)", "1.25"]
    # TRL: the passes are what its batch preparation took beyond generating and scoring, the
    # update the rest of its step; it has no learner calls, sync (generate path) or checkpoint.
    assert trl_hf[1:] == ["TRL, `model.generate`", "0.500", "0.250 (50%)", "0.000 (0%)",
                          "0.125 (25%)", "0.125 (25%)", "–", "–", "–", "–", "–"]
    assert trl_vllm[1:4] == ["TRL, vLLM colocate", "2.00", "0.800 (40%)"]  # sync taken out


def test_limits_compare_the_trainer_with_the_same_work_done_bare():
    section = trainer_sections.limits([_entry()])
    rollout, with_passes, update_only = _rows(section)
    assert rollout[2:] == ["1,000 (1,000)", "2,000 (2,000)", "50% (50%)", "0.2 / 1.0"]
    # 64 sequences x 41 columns over time_learn_s (0.5 s) against the bare loop's times.
    assert with_passes[2:] == ["5,248 (5,248)", "9,996 (9,996)", "52% (52%)", "0.2 / 0.5"]
    assert update_only[2:] == ["5,248 (5,248)", "16,148 (16,148)", "32% (32%)", "0.2 / 0.5"]
    assert "learner rank 1 torch thread(s) (OMP_NUM_THREADS=1 in its Ray actor)" in section


def test_learner_ranks_are_compared_with_the_one_rank_run_and_left_out_when_not_run():
    entry = _entry()
    assert trainer_sections.learner_ranks([entry]) is None
    assert len(trainer_sections.sections([entry], CONTEXT)) == 3
    two = {"steps": [_ours_step(i + 1, s) for i, s in enumerate([100.0, 1.0, 1.0, 3.0, 1.0, 1.0])],
           "learner": {"torch_threads": 1, "OMP_NUM_THREADS": "1"}, "micro_batch": 8,
           "other_work_cores": 0.5}
    entry["more_ranks"] = [{"ranks": 2, "train": two}, {"ranks": 4, "error": "OOM"}]
    section = trainer_sections.learner_ranks([entry])
    one_rank, two_ranks = _rows(section)
    assert one_rank[1:] == ["1", "1", "16", "2.00 (2.00)", "0.125", "0.250", "0.125", "0.250",
                            "1.00× (1.00×)", "0.2"]
    assert two_ranks[1:] == ["2", "1", "8", "1.00 (1.00)", "0.062", "0.125", "0.062",
                             "0.125", "0.50× (0.50×)", "0.5"]
    assert "4 ranks failed on tiny: `OOM`." in section
    assert trainer_sections.sections([entry], CONTEXT)[-1] == section
