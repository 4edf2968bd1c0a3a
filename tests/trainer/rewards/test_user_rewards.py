"""The user's own rewards, against real worker processes and a real HTTP server: every way a
user's code or server can fail scores 0 and is counted, and never stalls or breaks a batch."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grpo_operator.api.inputs import RewardSpec
from grpo_trainer.rewards import (
    RewardFailures,
    RewardItem,
    build_run_reward,
    score_all,
)
from grpo_trainer.rewards.http_reward import HttpReward
from grpo_trainer.rewards.python_reward import PythonReward, RewardLoadError
from tests.json_http import send_json

USER_CODE = '''
import math, os, time

def score(completion, ground_truth, extra):
    """What each completion asks for; otherwise 1 when it equals the truth."""
    if completion == "raise":
        raise RuntimeError("the verifier broke on " + ground_truth)
    if completion == "nan":
        return math.nan
    if completion == "text":
        return "1.0"
    if completion == "hang":
        time.sleep(60)
    if completion == "die":
        os._exit(3)
    if completion == "print":
        print("a line on stdout")
        return 0.5
    if completion == "source":
        return 1.0 if extra["data_source"] == "letters" else 0.0
    return completion == ground_truth
'''


@pytest.fixture(scope="module")
def reward_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("reward") / "reward.py"
    path.write_text(USER_CODE)
    return path


@pytest.fixture(scope="module")
def pool(reward_file):
    reward = PythonReward(str(reward_file), "score", timeout_s=1.0, workers=2)
    yield reward
    reward.close()


def _items(*completions: str, truth: str = "a") -> list[RewardItem]:
    return [RewardItem(c, truth, "letters") for c in completions]


def test_a_python_reward_scores_in_order_and_counts_what_fails(pool):
    scores, failures = score_all(pool, _items("a", "b", "raise", "nan", "text", "source", "a"))
    assert scores == [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert failures == RewardFailures(errors=1, timeouts=0, invalid=2)


def test_a_hanging_or_dying_call_is_bounded_and_its_worker_replaced(pool):
    start = time.monotonic()
    scores, failures = score_all(pool, _items("hang", "a", "die", "a", "hang", "a"))
    elapsed = time.monotonic() - start
    assert scores == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert failures == RewardFailures(errors=1, timeouts=2, invalid=0)
    # Two workers, two 1 s hangs: bounded by the timeout, not by the 60 s sleeps.
    assert elapsed < 20, elapsed
    # The replaced workers serve the next batch.
    assert score_all(pool, _items("a", "a", "a")) == ([1.0, 1.0, 1.0], RewardFailures())


def test_the_users_prints_never_reach_the_trainers_stdout(reward_file, capfd):
    reward = PythonReward(str(reward_file), "score", workers=1)  # started under capfd
    try:
        assert score_all(reward, _items("print"))[0] == [0.5]
    finally:
        reward.close()
    out, err = capfd.readouterr()
    assert "a line on stdout" not in out and "a line on stdout" in err


@pytest.mark.parametrize(("code", "function", "message"), [
    ("def score(:\n", "score", "SyntaxError"),
    ("x = 1\n", "score", "has no function 'score'"),
    ("raise ImportError('no verifier library')\n", "score", "no verifier library"),
    ("def other(c, t, e):\n    return 1.0\n", "score", "has no function"),
])
def test_a_file_that_cannot_be_used_is_refused_at_start_with_the_reason(tmp_path, code,
                                                                        function, message):
    path = tmp_path / "reward.py"
    path.write_text(code)
    with pytest.raises(RewardLoadError, match=message):
        PythonReward(str(path), function, workers=1)
    with pytest.raises(RewardLoadError, match="does not exist"):
        PythonReward(str(tmp_path / "missing.py"), "score", workers=1)


# --- http -----------------------------------------------------------------------------------

class _Verifier:
    """A reward server: scores 1 for completion == groundTruth; ``behaviour`` per completion
    of a batch's first item: ``flaky`` answers 503 to a batch's first try, ``slow`` sleeps past
    the client's timeout on every try, ``bad-request`` answers 400, ``short`` returns one score
    too few, ``nan`` returns null and a string for the scores."""

    def __init__(self) -> None:
        self.requests: list[list[dict]] = []
        self.tries: dict[str, int] = {}
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        verifier = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                items = body["items"]
                with verifier.lock:
                    verifier.requests.append(items)
                    key = "|".join(i["completion"] for i in items)
                    verifier.tries[key] = verifier.tries.get(key, 0) + 1
                    first_try = verifier.tries[key] == 1
                    verifier.in_flight += 1
                    verifier.max_in_flight = max(verifier.max_in_flight, verifier.in_flight)
                try:
                    verifier.answer(self, items, first_try)
                finally:
                    with verifier.lock:
                        verifier.in_flight -= 1

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/score"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, handler, items, first_try: bool) -> None:
        behaviour = items[0]["completion"]
        time.sleep(0.2)  # long enough for requests to overlap
        if behaviour == "flaky" and first_try:
            return send_json(handler, 503, {"error": "warming up"})
        if behaviour == "slow":
            time.sleep(1.5)
        if behaviour == "bad-request":
            return send_json(handler, 400, {"error": "no"})
        scores = [float(i["completion"] == i["groundTruth"]) for i in items]
        if behaviour == "short":
            scores = scores[:-1]
        if behaviour == "nan":
            scores = [None, "1"] + scores[2:]
        assert all(i["dataSource"] == "letters" for i in items)
        return send_json(handler, 200, {"scores": scores})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def verifier():
    server = _Verifier()
    yield server
    server.close()


def test_an_http_reward_batches_concurrently_and_retries_what_the_server_refuses(verifier):
    reward = HttpReward(verifier.url, batch_size=3, max_retries=2, timeout_s=5, concurrency=2,
                        backoff_s=0.05)
    items = _items("flaky", "a", "b", *(["a", "b", "a"] * 3))
    try:
        scores, failures = score_all(reward, items)
    finally:
        reward.close()
    assert scores == [0.0, 1.0, 0.0] + [1.0, 0.0, 1.0] * 3
    assert failures == RewardFailures()
    assert {len(r) for r in verifier.requests} == {3}  # batches of batch_size
    assert verifier.tries["flaky|a|b"] == 2  # refused once with 503, then answered
    assert verifier.max_in_flight == 2  # concurrency, and no more


@pytest.mark.parametrize(("first", "expected"), [
    ("slow", RewardFailures(timeouts=3)),        # every try timed out
    ("bad-request", RewardFailures(errors=3)),   # 400: not retried
    ("short", RewardFailures(errors=3)),         # a wrong answer: not retried
    ("nan", RewardFailures(invalid=2)),          # null and "1" are not numbers
])
def test_an_http_batch_that_fails_scores_zero_and_is_counted(verifier, first, expected):
    reward = HttpReward(verifier.url, batch_size=3, max_retries=1, timeout_s=0.8,
                        concurrency=2, backoff_s=0.05)
    try:
        scores, failures = score_all(reward, _items(first, "a", "a", "a", "a", "a"))
    finally:
        reward.close()
    assert failures == expected
    assert scores[3:] == [1.0, 1.0, 1.0]  # the other batch is unaffected
    tries = verifier.tries[f"{first}|a|a"]
    assert tries == (2 if first == "slow" else 1)  # only a timeout is retried here


def test_a_server_that_is_down_fails_its_items_after_the_retries():
    reward = HttpReward("http://127.0.0.1:9/score", batch_size=4, max_retries=2,
                        timeout_s=0.5, backoff_s=0.01)
    try:
        assert score_all(reward, _items("a", "a")) == ([0.0, 0.0], RewardFailures(errors=2))
    finally:
        reward.close()


# --- building from the spec -----------------------------------------------------------------

def test_the_spec_builds_each_kind_of_reward(reward_file, verifier):
    python = build_run_reward(RewardSpec.model_validate(
        {"name": "python", "python": {"path": "reward.py"}, "timeoutSeconds": 2,
         "concurrency": 1}), str(reward_file))
    try:
        assert isinstance(python, PythonReward) and python.timeout_s == 2
        assert score_all(python, _items("a", "raise"))[1] == RewardFailures(errors=1)
    finally:
        python.close()
    http = build_run_reward(RewardSpec.model_validate(
        {"name": "http", "http": {"url": verifier.url, "batchSize": 2}}), None)
    try:
        assert score_all(http, _items("a", "b", "a")) == ([1.0, 0.0, 1.0], RewardFailures())
    finally:
        http.close()
    builtin = build_run_reward(RewardSpec.model_validate({"name": "exact_match"}), None)
    assert score_all(builtin, _items("a", "b")) == ([1.0, 0.0], RewardFailures())


def test_a_stream_left_midway_leaves_no_stale_call_for_the_next_batch(reward_file):
    """Scores stream out as they come; a consumer that stops early (the trainer died while
    sealing) must not leave a running call to answer the next batch's items."""
    reward = PythonReward(str(reward_file), "score", timeout_s=5.0, workers=2)
    try:
        stream = reward.score_stream(_items("a", "hang", "b", "b"), RewardFailures())
        first = next(stream)
        assert first == (0, 1.0)  # the quick one first, while "hang" still runs
        stream.close()
        assert score_all(reward, _items("b", "a")) == ([0.0, 1.0], RewardFailures())
    finally:
        reward.close()


def test_an_answer_too_long_is_not_read_to_its_end(verifier, monkeypatch):
    """A server that answers without end fills nothing: reading stops at the bound."""
    import grpo_trainer.rewards.http_reward as http_reward

    monkeypatch.setattr(http_reward, "MAX_RESPONSE_BYTES", 100)
    reward = HttpReward(verifier.url, batch_size=64, max_retries=0, timeout_s=5)
    try:
        # 64 scores of JSON are over 300 bytes.
        assert score_all(reward, _items(*["a"] * 64)) == ([0.0] * 64, RewardFailures(errors=64))
    finally:
        reward.close()
