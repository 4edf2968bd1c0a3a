"""``reward.name: http``: a remote verifier, batch by batch.

Each request is ``POST url`` with ``{"items": [{"completion", "groundTruth", "dataSource"},
...]}`` (at most ``batch_size`` items) and must answer 200 with ``{"scores": [...]}``, one
number (or boolean) per item, in order. Up to ``concurrency`` requests are in flight. A request
that cannot connect, times out (``timeout_s``, for connecting and for each read) or is answered
429 or 5xx is retried up to ``max_retries`` times, waiting ``backoff_s`` doubling in between;
what still fails scores 0 for each of its items (timeouts if the last try timed out, errors
otherwise). Another 4xx, or an answer that is not the JSON above (or is longer than
``MAX_RESPONSE_BYTES``, where reading stops), is not retried: its items score 0 as errors. A
score that is not a finite number scores 0 as invalid.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from grpo_trainer.rewards.batch import RewardFailures, RewardItem, as_score

log = logging.getLogger("grpo_trainer.rewards")

MAX_RESPONSE_BYTES = 16 * 2**20


class _Retryable(Exception):
    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class HttpReward:
    """The client (see the module docstring)."""

    def __init__(self, url: str, batch_size: int = 16, max_retries: int = 3,
                 timeout_s: float = 10.0, concurrency: int = 4, backoff_s: float = 0.5) -> None:
        import requests
        from requests.adapters import HTTPAdapter

        self.url, self.batch_size, self.max_retries = url, batch_size, max_retries
        self.timeout_s, self.backoff_s = timeout_s, backoff_s
        self._requests = requests
        self._session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=concurrency, max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="grpo-reward-http")

    def score_stream(self, items: Sequence[RewardItem],
                     failures: RewardFailures) -> Iterator[tuple[int, float]]:
        starts = range(0, len(items), self.batch_size)
        futures = {self._pool.submit(self._score_chunk, items[i : i + self.batch_size]): i
                   for i in starts}
        problems = []
        mine = RewardFailures()  # this batch's, added to ``failures`` at its end
        try:
            for future in as_completed(futures):
                chunk_scores, chunk_failures, problem = future.result()
                mine.add(chunk_failures)
                if problem:
                    problems.append(problem)
                for offset, score in enumerate(chunk_scores):
                    yield futures[future] + offset, score
        finally:
            failures.add(mine)
            for future in futures:
                future.cancel()
        if mine.total:
            log.warning("reward %s: %d of %d completions scored 0%s", self.url, mine.total,
                        len(items), f", e.g. {problems[0]}" if problems else "")

    def _score_chunk(self, chunk: Sequence[RewardItem]
                     ) -> tuple[list[float], RewardFailures, str | None]:
        body = {"items": [{"completion": i.completion, "groundTruth": i.ground_truth,
                           "dataSource": i.data_source} for i in chunk]}
        zeros = [0.0] * len(chunk)
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                values = self._post(body, len(chunk))
            except _Retryable as err:
                if attempt == self.max_retries:
                    failed = (RewardFailures(timeouts=len(chunk)) if err.timed_out
                              else RewardFailures(errors=len(chunk)))
                    return zeros, failed, f"{err} (after {attempt + 1} tries)"
                continue
            except ValueError as err:  # answered, wrongly: retrying would not help
                return zeros, RewardFailures(errors=len(chunk)), str(err)
            scores = [as_score(v) for v in values]
            invalid = sum(s is None for s in scores)
            return ([0.0 if s is None else s for s in scores], RewardFailures(invalid=invalid),
                    f"{invalid} scores were not finite numbers" if invalid else None)
        raise AssertionError("unreachable")

    def _post(self, body: dict, expected: int) -> list:
        requests = self._requests
        try:
            with self._session.post(self.url, json=body, timeout=self.timeout_s,
                                    stream=True) as response:
                content = _bounded(response)
        except requests.Timeout as err:
            raise _Retryable(f"timed out: {err}", timed_out=True) from None
        except requests.RequestException as err:
            raise _Retryable(f"request failed: {err}") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retryable(f"HTTP {response.status_code}")
        if response.status_code != 200:
            raise ValueError(f"HTTP {response.status_code}: {content[:200]!r}")
        try:
            scores = json.loads(content)["scores"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f'the answer is not {{"scores": [...]}}: {content[:200]!r}') \
                from None
        if not isinstance(scores, list) or len(scores) != expected:
            raise ValueError(f"the answer has {len(scores) if isinstance(scores, list) else 0} "
                             f"scores for {expected} items")
        return scores

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._session.close()


def _bounded(response) -> bytes:
    """The answer's body, read no further than ``MAX_RESPONSE_BYTES`` (a server's mistake, or
    malice, must not fill the trainer's memory)."""
    content = bytearray()
    for chunk in response.iter_content(64 * 1024):
        content += chunk
        if len(content) > MAX_RESPONSE_BYTES:
            raise ValueError(f"the answer is over {MAX_RESPONSE_BYTES} bytes")
    return bytes(content)
