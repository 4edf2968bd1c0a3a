"""The example tiny run, end to end on the local cluster, as `make demo` runs it: accepted, a
RayCluster (KubeRay, KWOK), the driver run for real against a real local Ray head, the real
trainer on the CPU reporting into status, Succeeded with the artifact's digest, cleaned up."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from demo import __main__ as demo
from demo import inputs
from grpo_operator.api.checkpoint_layout import DIGEST_MANIFEST_FILE
from grpo_operator.api.digest import DigestManifest
from localcluster.dashboard import dashboard_queries, load_dashboard
from localcluster.prometheus import PrometheusServer, check_metrics
from tests.operator.conftest import METRICS_URL
from tests.trainer.tensorboard_events import scalars as read_scalars
from tests.waiting import wait_for

pytestmark = pytest.mark.cluster


BEFORE_TRAINING = ["VerifyingInputs", "RestoringCheckpoint", "StartingEngines"]
WHILE_TRAINING = {"Training", "Checkpointing", "VerifyingInputs", "SealingArtifact"}


def _assert_activities_in_order(shown: str) -> None:
    """The trainer's activities as the demo printed them (each change; a short one the 1 s
    poll missed is absent): what precedes training in its order, then training's own."""
    seen: list[str] = []
    for activity in re.findall(r"\] Running\s+([A-Z][A-Za-z]+)\s+step", shown):
        if not seen or seen[-1] != activity:
            seen.append(activity)
    assert "Training" in seen, shown[-4000:]
    before, after = seen[:seen.index("Training")], seen[seen.index("Training"):]
    # Engines take the longest before training (vLLM starts in a minute on the CPU): seen.
    assert "StartingEngines" in before, seen
    assert before == sorted(before, key=BEFORE_TRAINING.index), seen
    assert set(after) <= WHILE_TRAINING, seen


def _get_grpo_row(shown: str, name: str) -> dict[str, str]:
    """The run's row of the `kubectl get grpo` table the demo printed, by column (cut at the
    header's column starts: an empty cell, such as ETA once the run ended, is "")."""
    lines = shown.splitlines()
    header = next(line for line in lines if line.startswith("NAME "))
    row = next(line for line in lines if line.startswith(f"{name} "))
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    return {header[a:b].strip(): row[a:b].strip()
            for a, b in zip(starts, [*starts[1:], None], strict=True)}


def _series_values(result: list[dict]) -> dict[float, float]:
    """The one series of a range query, as {time: value}."""
    assert len(result) == 1, result
    return {float(t): float(v) for t, v in result[0]["values"]}


def _assert_scraped(prometheus: PrometheusServer, namespace: str, name: str, since: float,
                    rewards: dict[int, float]) -> None:
    """What a real Prometheus scraped from the operator and, found through the PodMonitor's
    pod discovery, the run's driver: steps and rewards that are the trainer's own, at every
    scrape; then every query of the dashboard answered."""
    run = f'namespace="{namespace}", name="{name}"'
    now = time.time()
    steps = _series_values(prometheus.query_range(
        f"grpo_trainer_completed_steps{{{run}}}", since, now, 1))
    reward = _series_values(prometheus.query_range(
        f"grpo_trainer_reward_mean{{{run}}}", since, now, 1))
    assert max(steps.values()) >= 1, steps
    for at, value in reward.items():  # both from the same report at the same scrape
        assert value == pytest.approx(rewards[int(steps[at])], rel=1e-6), (at, steps[at])
    # While the driver was up (its target goes, and its series go stale, once it exits).
    alive = max(steps)
    queries = dashboard_queries(load_dashboard(), {
        "namespace": namespace, "run": name, "__rate_interval": "1m",
        "datasource": "prometheus"})
    empty = [q for q in queries if not prometheus.query(q, at=alive)]
    assert not empty, f"{len(empty)} of {len(queries)} dashboard queries return no series: {empty}"
    assert check_metrics(prometheus.bin_dir / "promtool", _get(METRICS_URL)) == []


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


def test_the_tiny_example_trains_to_success_and_cleans_up(cluster, operator, runs, tmp_path,
                                                          capsys, prometheus):
    """This is also `make demo`, shortened: the demo's own code applies and follows the run."""
    body = inputs.relocate(inputs.load_example(), tmp_path)
    body["spec"]["budget"]["maxGPUHours"] = 10  # so that the dashboard's budget panel has one
    name, steps = body["metadata"]["name"], body["spec"]["algorithm"]["maxSteps"]
    since = time.time()
    code = demo.run(cluster, body, tmp_path / "demo", timeout=600, namespace=runs.namespace)
    shown = capsys.readouterr().out
    status = runs.status(name)
    assert code == 0, (status, shown[-4000:])
    run = runs.get(name)
    assert f"Succeeded     step {steps}/{steps}" in shown, shown[-4000:]
    _assert_activities_in_order(shown)
    assert re.search(rf"step [1-9]\d*/{steps}  eta \d", shown), shown[-4000:]
    assert status["progress"]["percent"] == 100 and "eta" not in status["progress"]
    row = _get_grpo_row(shown, name)
    assert row["DONE%"] == "100" and row["ETA"] == "", row
    # Evaluations after steps 2 and 4 (evalIntervalSteps) and 5 (the last), newest first; the
    # wide table's Eval column is the newest one's pass@1.
    evals = status["ledger"]["evals"]
    assert [e["step"] for e in evals] == [5, 4, 2], evals
    assert all(e["prompts"] == 16 and e["samples"] == 1 and "passAtK" not in e for e in evals)
    assert float(row["EVAL"]) == pytest.approx(evals[0]["passAt1"]), row
    assert (row["ACTIVITY"], row["REASON"]) == ("SealingArtifact", "Completed"), row
    assert re.search(r"eval@[245] pass@1 \d", shown), shown[-4000:]  # as the demo polled it
    # Colocated on the CPU, the engine runs its model in its actor's process on both cores of
    # its 2-CPU worker pod while it generates (a Ray actor with a CPU share starts on one
    # thread, and vLLM would cut it to one).
    log = cluster.driver_runner.job_log(runs.namespace, f"{name}-a1")
    assert log is not None, log
    assert ("rollout engine 0: engine core in-process, 0 child processes, 2 torch threads, "
            "cores=[0, 1]") in log.read_text(), log
    curve = (tmp_path / "demo" / "curve.txt").read_text().splitlines()
    assert [int(row.split()[0]) for row in curve[1:]] == list(range(1, steps + 1)), curve
    assert (tmp_path / "demo" / "curve.png").stat().st_size > 0

    for condition in ("Succeeded", "Ready"):
        waited = cluster.kubectl("wait", f"grpo/{name}", "-n", runs.namespace,
                                 f"--for=condition={condition}", "--timeout=10s")
        assert "condition met" in waited.stdout
    assert runs.kstatus(name)[0] == "Current"

    ledger, terminal = status["ledger"], status["terminal"]
    assert ledger["plannedSteps"] == steps
    assert ledger["generatedTokens"] > 0 and ledger["promptTokens"] > 0
    assert ledger["evalGeneratedTokens"] > 0 and ledger["evalPromptTokens"] > 0
    assert ledger["budgetRemaining"]["generatedTokens"] == (
        body["spec"]["budget"]["maxGeneratedTokens"] - ledger["generatedTokens"]
        - ledger["evalGeneratedTokens"]
    )
    # The trainer's TensorBoard records, one per step, beside the checkpoints; Prometheus's
    # scrapes of the driver agree with them.
    board = read_scalars(tmp_path / "checkpoints" / run["metadata"]["uid"] / "tensorboard")
    assert [step for step, _ in board["reward/mean"]] == list(range(1, steps + 1))
    assert [step for step, _ in board["seconds/checkpoint"]] == list(range(1, steps + 1))
    assert {"seconds/ref_logprobs", "seconds/old_logprobs", "train/grad_norm",
            "train/entropy", "kl/reference"} <= set(board)
    assert [step for step, _ in board["eval/pass_at_1"]] == [2, 4, 5]
    _assert_scraped(prometheus, runs.namespace, name, since, dict(board["reward/mean"]))

    artifact = tmp_path / "checkpoints" / run["metadata"]["uid"] / "artifact"
    assert terminal["outcome"] == "Succeeded"
    assert terminal["artifact"]["path"] == f"/checkpoints/{run['metadata']['uid']}/artifact"
    assert terminal["artifact"]["sha256"] == DigestManifest.for_directory(
        artifact, exclude=[DIGEST_MANIFEST_FILE]).digest

    # Cleanup: the RayCluster goes, and the receipt is written only once it is gone.
    wait_for(lambda: (runs.status(name).get("terminal") or {}).get("cleanup"), 60,
             what="the cleanup receipt")
    assert "RayCluster" not in runs.children(name)
    assert runs.status(name)["terminal"]["cleanup"]["rayClusterDeleted"] is True
    for expected in ("Accepted", "Provisioning", "Running", "Succeeded", "CleanedUp"):
        runs.posted(name, lambda e, reason=expected: e[1] == reason, what=f"the {expected} Event")

    # What the run cost the API server, as the operator accounts for it: passes read the run
    # and its children from the watches' cache, so requests are writes (creates, status,
    # Events), and reads only of the run itself while its cache is behind a write of its own.
    cost = wait_for(lambda: re.search(
        rf"run {runs.namespace}/{name}: (\d+) API requests \((\d+) reads\) in (\d+) "
        r"reconcile passes", operator.log_path.read_text()), 30,
        what="the run's cost in the operator log")
    requests, reads, passes = map(int, cost.groups())
    assert 0 < requests <= 2 * passes, (requests, passes)
    assert reads <= requests - reads, (reads, requests)
