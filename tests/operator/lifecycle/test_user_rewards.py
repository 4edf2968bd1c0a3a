"""The user's own rewards through the operator, on the tiny example: a python function from a
ConfigMap (mounted into the Ray pods, failing on purpose so that the step's failure counts are
exercised) and an http reward served from this test process (failing each batch's first
request so that retries are exercised). Both runs Succeed and learn from a dense reward.

The toy task's ground truth is the letter ``a``; the dense reward is the fraction of the
completion's letters equal to it (as ``grpo_trainer.rewards.char_fraction``). The tiny random
model's completions are random text: about a fifth of them hold no ``a`` (measured: 57 of 256
sampled completions of 16 tokens), so a step's mean reward is 0 only if every one of its
dense-scored completions lacks one — below 0.22**16 for 16 of them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from kubernetes import client

from grpo_operator.api.digest import DigestManifest
from grpo_trainer.toy import LETTERS_SOURCE
from tests.json_http import send_json
from tests.operator.lifecycle.runs import run_failure, tiny_example
from tests.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.second_cluster]

GROUP_SIZE, PROMPTS_PER_STEP = 4, 8
COMPLETIONS = GROUP_SIZE * PROMPTS_PER_STEP  # per step
STEPS = 2

# The reward file the ConfigMap holds. The failures come from a call counter, not from the
# completions' text (random here): with one worker process (concurrency 1) a step's calls are
# consecutive calls of that worker, and any 4k consecutive calls hold exactly k of each
# residue mod 4 — so every step has exactly a quarter of errors and a quarter of NaNs,
# whatever the completions say.
REWARD_PY = '''\
"""The toy task's dense reward, failing on purpose in a fixed share of calls."""
import math

calls = 0


def fraction(completion, ground_truth):
    """The fraction of the completion's letters equal to the ground truth's letter."""
    target = str(ground_truth).strip().casefold()
    letters = [c for c in str(completion).casefold() if c.isalpha()]
    return sum(c == target for c in letters) / len(letters) if letters else 0.0


def flaky(completion, ground_truth, extra):
    """Of every four calls in this process: the first raises, the second returns NaN."""
    global calls
    calls += 1
    if extra.get("data_source") != "toy/letters":
        raise ValueError(f"unexpected extra {extra!r}")
    if calls % 4 == 1:
        raise RuntimeError("the first of every four calls fails")
    if calls % 4 == 2:
        return math.nan
    return fraction(completion, ground_truth)
'''

# The reward server listens on a loopback address of its own. The harness's pods share this
# machine's network (a pod has a mount and a UTS namespace, not a network namespace; its IP is
# a loopback address of its own: 127.0.1.x for Ray pods, 127.1.0.x for drivers, 127.0.0.1 is
# the control plane's), so the trainer on the Ray head pod reaches any local address. One
# outside those ranges stands for another machine's, as an in-cluster reward Service's would
# be — never the head pod's own 127.0.0.1.
REWARD_SERVER_HOST = "127.2.0.1"


def _fraction():
    scope: dict = {}
    exec(compile(REWARD_PY, "reward.py", "exec"), scope)
    return scope["fraction"]


def _run(tmp_path, name: str, reward: dict) -> dict:
    """The tiny example, small: two steps of 32 completions, no evaluation, no restart (a
    failure shows at once)."""
    body = tiny_example(tmp_path)
    body["metadata"]["name"] = name
    spec = body["spec"]
    spec["reward"] = reward
    spec["dataset"].pop("validationFile")
    spec["algorithm"].pop("evalIntervalSteps")
    spec["algorithm"].update(maxSteps=STEPS, groupSize=GROUP_SIZE,
                             promptsPerStep=PROMPTS_PER_STEP, miniBatchSize=16,
                             microBatchSize=8)
    spec["runPolicy"]["maxRestarts"] = 0
    return body


def _finished(cluster, runs, name: str) -> dict:
    """The run's status once it has ended, Succeeded (else the driver's log says why)."""
    wait_for(lambda: runs.phase(name) in ("Succeeded", "Failed"), 600, what=f"{name}'s end")
    status = runs.status(name)
    assert status["phase"] == "Succeeded", run_failure(cluster, runs.namespace, status,
                                                       f"{name}-a1")
    return status


def _last_step(runs, name: str) -> dict:
    """The trainer's figures of the last step, from the report the driver relayed (the
    status keeps the ledger, not the step's figures)."""
    report = runs.core.read_namespaced_config_map(f"{name}-report", runs.namespace)
    return json.loads(report.data["report.json"])["lastStep"]


def test_a_python_reward_from_a_config_map_scores_and_counts_its_failures(
        cluster, runs, tmp_path):
    name = "python-reward"
    runs.core.create_namespaced_config_map(runs.namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="letters-reward"), immutable=True,
        data={"reward.py": REWARD_PY, "notes.txt": "not mounted"}))
    runs.create(_run(tmp_path, name, {
        # One worker, never replaced for a slow call on a busy machine (that would restart
        # its counter): the counts below are exact.
        "name": "python", "concurrency": 1, "timeoutSeconds": 60,
        "python": {"configMap": "letters-reward", "function": "flaky"}}))
    status = _finished(cluster, runs, name)

    assert status["ledger"]["completedSteps"] == STEPS
    # Half of the last step's completions were scored by the dense reward, the rest 0.
    assert status["ledger"]["rewardMean"] > 0, status["ledger"]
    last = _last_step(runs, name)
    assert last["step"] == STEPS
    assert (last["rewardErrors"], last["rewardInvalid"], last["rewardTimeouts"]) == (
        COMPLETIONS // 4, COMPLETIONS // 4, 0), last
    # The file is a frozen input: the first attempt recorded its digest, the one a user
    # computes to pin it in reward.python.sha256 (`python -m grpo_trainer digest DIR FILE`).
    recorded = status["recovery"]["inputs"]["reward"]
    assert re.fullmatch(r"[0-9a-f]{64}", recorded), status
    (tmp_path / "reward").mkdir()
    (tmp_path / "reward" / "reward.py").write_text(REWARD_PY)
    assert recorded == DigestManifest.for_files(tmp_path / "reward", ["reward.py"]).digest


class RewardServer:
    """The letters reward over the http reward's protocol; every batch's first request is
    answered 503, its retry scored."""

    def __init__(self) -> None:
        fraction = _fraction()
        self.lock = threading.Lock()
        self.refused: set[str] = set()  # batches answered 503
        self.scored: list[str] = []  # batches answered with scores
        self.malformed: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                batch = hashlib.sha256(body).hexdigest()
                try:
                    items = json.loads(body)["items"]
                    scores = [fraction(i["completion"], i["groundTruth"]) for i in items]
                    assert all(i["dataSource"] == LETTERS_SOURCE for i in items), items[:1]
                except (ValueError, KeyError, TypeError, AssertionError) as e:
                    with server.lock:
                        server.malformed.append(f"{e!r}: {body[:200]!r}")
                    return send_json(self, 400, {"error": "malformed"})
                with server.lock:
                    first = batch not in server.refused
                    if first:
                        server.refused.add(batch)
                    else:
                        server.scored.append(batch)
                if first:
                    return send_json(self, 503, {"error": "try again"})
                return send_json(self, 200, {"scores": scores})

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer((REWARD_SERVER_HOST, 0), Handler)
        self.url = f"http://{REWARD_SERVER_HOST}:{self.http.server_address[1]}/score"

    def __enter__(self) -> RewardServer:
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def reward_server() -> Iterator[RewardServer]:
    with RewardServer() as server:
        yield server


def test_an_http_reward_is_retried_past_a_failing_server_and_scores(
        cluster, runs, tmp_path, reward_server):
    name = "http-reward"
    batch_size = 8
    runs.create(_run(tmp_path, name, {
        "name": "http", "http": {"url": reward_server.url, "batchSize": batch_size}}))
    status = _finished(cluster, runs, name)

    assert status["ledger"]["completedSteps"] == STEPS
    assert status["ledger"]["rewardMean"] > 0, status["ledger"]
    last = _last_step(runs, name)
    assert (last["rewardErrors"], last["rewardInvalid"], last["rewardTimeouts"]) == (0, 0, 0)
    # Every batch was refused once and then scored: the trainer retried each (identical
    # batches, such as two of empty completions, would count once).
    assert reward_server.malformed == []
    batches = STEPS * math.ceil(COMPLETIONS / batch_size)
    assert 1 <= len(reward_server.refused) <= batches, reward_server.refused
    assert set(reward_server.scored) == reward_server.refused
    # No reward file, so no reward digest among the frozen inputs.
    assert "reward" not in status["recovery"]["inputs"], status["recovery"]
