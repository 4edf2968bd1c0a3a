"""The trainer half of ``make bench``: this trainer against TRL's GRPOTrainer, and against the
same work done bare (``python -m bench.trainer`` with PYTHONPATH=hack, from the repo root).

For each experiment of ``bench.experiment`` it runs, one subprocess at a time (2 cores: never
two sides at once, and no side shares memory or threads with another): the model and dataset
(``trainer_side prepare``), this trainer (``trainer_side train``), TRL with ``model.generate``
and, on ``TRL_VLLM_EXPERIMENTS``, with its vLLM path (``trl_side`` in ``.bench/trl-venv``,
created on demand by ``setup-trl-venv.sh``), the trainer's engine standalone and a bare torch
loop (``limits_side``). Outputs and logs stay in ``.bench/trainer/<experiment>/``. ``sections``
returns the markdown (``trainer_sections``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench import trainer_sections
from bench.experiment import EXPERIMENTS, Experiment
from bench.trainer_side import PREPARED

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / ".bench" / "trainer"
SIDE_TIMEOUT_S = 900
ENGINE_CORES = re.compile(r"rollout engine.*cores=\[([^\]]*)\]")  # RolloutEngine.describe
# TRL's vLLM path runs here but slowly: on the 25M model at 8 x 8 its steps took 40-100 s
# (generation and update both slower than with model.generate), which alone would take the
# benchmark past its budget. It is measured on these experiments only.
TRL_VLLM_EXPERIMENTS = ("tiny",)
# This trainer again with more CPU learner ranks, on this experiment only (about 2 minutes each).
RANKS_EXPERIMENT, MORE_RANKS = "25M", (2, 4)

Progress = Callable[[str], None]


class SideFailed(RuntimeError):
    """A side's subprocess exited non-zero; ``last_line`` is the last line it printed."""

    def __init__(self, command: str, log: Path, last_line: str) -> None:
        super().__init__(f"{command} failed (log: {log}): {last_line}")
        self.last_line = last_line


class OtherWork:
    """How many cores, on average, processes outside one side's process tree (and outside
    this one) kept busy while the side ran: the machine is shared, and this says how much a
    side's timings were disturbed. The tree is sampled every ``PERIOD_S``; CPU a process spent
    after its last sample counts as other work, a slight overestimate."""

    PERIOD_S = 0.5

    def __init__(self, root: int) -> None:
        import psutil

        self._psutil = psutil
        self._root = root
        self._cpu: dict[int, float] = {}  # pid -> CPU seconds at its last sample
        self._own = self._cpu_of(psutil.Process())
        self._busy, self._start = self._machine_busy(), time.monotonic()

    def _machine_busy(self) -> float:
        t = self._psutil.cpu_times()
        return sum(t) - t.idle - t.iowait

    @staticmethod
    def _cpu_of(process) -> float:
        times = process.cpu_times()
        return times.user + times.system

    def sample(self) -> None:
        try:
            root = self._psutil.Process(self._root)
            tree = [root, *root.children(recursive=True)]
        except self._psutil.Error:
            return
        for process in tree:
            try:
                self._cpu[process.pid] = self._cpu_of(process)
            except self._psutil.Error:
                continue

    def cores(self) -> float:
        mine = sum(self._cpu.values()) + self._cpu_of(self._psutil.Process()) - self._own
        elapsed = time.monotonic() - self._start
        return max(0.0, self._machine_busy() - self._busy - mine) / elapsed


def _run(argv: list[str], log: Path, progress: Progress,
         env: dict | None = None) -> tuple[str, float]:
    """Run ``argv`` from the repo root, its output into ``log``; lines starting ``[bench]`` or
    ``[trl-venv]`` go to ``progress``. Returns the output and the cores other work kept busy
    meanwhile (``OtherWork``)."""
    lines = []
    environment = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    environment.update({"HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "hack"), **(env or {})})
    with subprocess.Popen(argv, cwd=ROOT, env=environment, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT) as proc, log.open("w") as out:
        other = OtherWork(proc.pid)
        done = threading.Event()

        def watch() -> None:
            deadline = time.monotonic() + SIDE_TIMEOUT_S
            while not done.wait(OtherWork.PERIOD_S):
                other.sample()
                if time.monotonic() > deadline:  # a hung side may print nothing
                    proc.kill()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            for line in proc.stdout:
                out.write(line)
                lines.append(line)
                if line.startswith(("[bench]", "[trl-venv]")):
                    progress(line.strip())
            code = proc.wait()
        finally:
            done.set()
            watcher.join()
    if code:
        last = next((ln.strip() for ln in reversed(lines) if ln.strip()), f"exit code {code}")
        raise SideFailed(" ".join(argv[1:4]), log, last)
    return "".join(lines), other.cores()


def _side(python: str, module: str, args: list[str], workdir: Path, name: str,
          progress: Progress, env: dict | None = None) -> tuple[dict, str]:
    """Run ``python -m module args --out <workdir>/<name>.json``; its JSON, with
    ``other_work_cores`` added, and its output."""
    out = workdir / f"{name}.json"
    output, other = _run([python, "-m", module, *args, "--workdir", str(workdir),
                          "--out", str(out)], workdir / f"{name}.log", progress, env)
    return {**json.loads(out.read_text()), "other_work_cores": other}, output


def trl_python(progress: Progress) -> str:
    """The TRL venv's python, creating the venv first if its pins changed."""
    script = ROOT / "hack" / "bench" / "setup-trl-venv.sh"
    WORK.mkdir(parents=True, exist_ok=True)
    output, _ = _run(["bash", str(script)], WORK / "setup-trl-venv.log", progress)
    return output.strip().splitlines()[-1]


def run_experiment(exp: Experiment, trl: str, progress: Progress) -> dict:
    """Every side of one experiment, in order; the entry ``trainer_sections`` reads."""
    workdir = WORK / exp.name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    ours_py, name = sys.executable, ["--experiment", exp.name]
    trl_env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "hack"), str(ROOT / "trainer-image")])}

    progress(f"{exp.name}: making the model and the dataset")
    prepared, _ = _side(ours_py, "bench.trainer_side", ["prepare", *name], workdir,
                        Path(PREPARED).stem, progress)
    progress(f"{exp.name}: this trainer ({exp.total_steps} steps; Ray and vLLM start first)")
    ours, ours_log = _side(ours_py, "bench.trainer_side", ["train", *name], workdir, "train",
                           progress)
    progress(f"{exp.name}: TRL with model.generate")
    trl_hf, _ = _side(trl, "bench.trl_side", name, workdir, "trl", progress, trl_env)
    trl_vllm = None
    if exp.name in TRL_VLLM_EXPERIMENTS:
        progress(f"{exp.name}: TRL with its vLLM path")
        try:
            trl_vllm, _ = _side(trl, "bench.trl_side", [*name, "--generation", "vllm"],
                                workdir, "trl-vllm", progress, trl_env)
        except SideFailed as err:
            trl_vllm = {"error": err.last_line}

    more_ranks = []
    for ranks in MORE_RANKS if exp.name == RANKS_EXPERIMENT else ():
        progress(f"{exp.name}: this trainer with {ranks} learner ranks")
        try:
            result, _ = _side(ours_py, "bench.trainer_side",
                              ["train", *name, "--learner-ranks", str(ranks)], workdir,
                              f"train-ranks{ranks}", progress)
            more_ranks.append({"ranks": ranks, "train": result})
        except SideFailed as err:
            more_ranks.append({"ranks": ranks, "error": err.last_line})

    step_prompts = [[prepared["prompt_ids"][i] for i in step["prompt_indices"]]
                    for step in ours["steps"]]
    (workdir / "prompts.json").write_text(json.dumps(step_prompts))
    progress(f"{exp.name}: the trainer's engine standalone")
    engine, engine_log = _side(ours_py, "bench.limits_side",
                               ["engine", *name, "--prompts", str(workdir / "prompts.json")],
                               workdir, "engine", progress)
    # The learner's batch is as wide as the longest prompt plus the longest response; every
    # step of a random model has completions cut at the limit, so that is maxResponseTokens.
    widths = [max(map(len, prompts)) + exp.max_response_tokens for prompts in step_prompts]
    progress(f"{exp.name}: bare torch loop")
    bare, _ = _side(ours_py, "bench.limits_side",
                    ["torch", *name, "--prompts", str(workdir / "prompts.json")],
                    workdir, "torch", progress)
    return {
        "experiment": exp.to_dict(),
        "parameters": prepared["parameters"],
        "ours": ours,
        "widths": widths,
        "trl": trl_hf,
        "trl_vllm": trl_vllm,
        "more_ranks": more_ranks,
        "engine": engine,
        "engine_cores": {"trainer": _cores(ours_log), "standalone": _cores(engine_log)},
        "bare": bare,
    }


def _cores(log: str) -> str:
    found = ENGINE_CORES.search(log)
    return found.group(1) if found else "?"


def sections(progress: Progress) -> list[str]:
    """Run the whole trainer benchmark (about 10 minutes on 2 cores, plus the TRL venv the
    first time) and return its markdown sections."""
    start, load_before = time.monotonic(), os.getloadavg()[0]
    trl = trl_python(progress)
    results = [run_experiment(exp, trl, progress) for exp in EXPERIMENTS]
    (WORK / "results.json").write_text(json.dumps(results))
    versions = results[0]["trl"]["versions"]
    context = {
        "trl_version": versions["trl"],
        "torch_version": versions["torch"].split("+")[0],
        "transformers_version": versions["transformers"],
        "runtime_s": time.monotonic() - start,
        "cores": os.cpu_count(),
        "load_before": f"{load_before:.1f}",
        "load_after": f"{os.getloadavg()[0]:.1f}",
    }
    return trainer_sections.sections(results, context)


def main() -> None:
    def progress(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    print("\n\n".join(sections(progress)))


if __name__ == "__main__":
    main()
