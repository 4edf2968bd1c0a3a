"""Verifiable rewards: ``(completion, ground_truth) -> float in [0, 1]``, pure and total.

``build_reward`` turns the CRD's ``spec.reward`` (a name plus camelCase options) into a scorer.
Every scorer returns 1.0 or 0.0, never raises on any completion text, and bounds the text it
scans. Option keys, as written in a GRPORun:

    {name: gsm8k}                                    no options
    {name: math_boxed}                               no options
    {name: exact_match, caseSensitive: true, strip: true}
    {name: regex, pattern: "...(?P<answer>...)...", group: answer, caseSensitive: true,
     strip: true}

Unknown names, unknown option keys, wrong option types and invalid regex patterns raise
ValueError when the reward is built. An option whose value is None counts as absent.

The user's own rewards (``python``: a function in worker processes, ``python_reward``;
``http``: a remote verifier, ``http_reward``) are built from the contract's ``RewardSpec`` by
``build_run_reward``; they score batches and may fail (``batch``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from grpo_trainer.rewards.batch import (
    BatchReward,
    Reward,
    RewardFailures,
    RewardFn,
    RewardItem,
    score_all,
)
from grpo_trainer.rewards.exact_match import ExactMatchReward
from grpo_trainer.rewards.gsm8k import GSM8KReward
from grpo_trainer.rewards.math_boxed import MathBoxedReward
from grpo_trainer.rewards.regex import RegexReward

# name -> (factory taking Python kwargs, {CRD option key: (kwarg, type)}, required CRD keys)
_REGISTRY: dict[str, tuple[Callable[..., RewardFn], dict[str, tuple[str, type]], set[str]]] = {
    "gsm8k": (GSM8KReward, {}, set()),
    "math_boxed": (MathBoxedReward, {}, set()),
    "exact_match": (
        ExactMatchReward,
        {"caseSensitive": ("case_sensitive", bool), "strip": ("strip", bool)},
        set(),
    ),
    "regex": (
        RegexReward.build,
        {
            "pattern": ("pattern", str),
            "group": ("group", str),
            "caseSensitive": ("case_sensitive", bool),
            "strip": ("strip", bool),
        },
        {"pattern"},
    ),
}

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CONCURRENCY = 4
REWARD_NAMES = tuple(_REGISTRY)
# The CRD option keys each reward accepts (for the contract and its docs).
REWARD_OPTIONS = {name: tuple(entry[1]) for name, entry in _REGISTRY.items()}


def build_reward(name: str, options: Mapping[str, Any] | None = None) -> RewardFn:
    """The scorer for reward ``name`` configured with CRD-level (camelCase) ``options``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown reward {name!r}; expected one of {REWARD_NAMES}")
    factory, accepted, required = _REGISTRY[name]
    given = {key: value for key, value in (options or {}).items() if value is not None}
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        allowed = ", ".join(accepted) or "none"
        raise ValueError(f"reward {name!r}: unknown option(s) {unknown}; accepted: {allowed}")
    missing = sorted(required - set(given))
    if missing:
        raise ValueError(f"reward {name!r}: missing required option(s) {missing}")
    kwargs = {}
    for key, value in given.items():
        kwarg, kind = accepted[key]
        if not isinstance(value, kind):
            raise ValueError(
                f"reward {name!r}: option {key!r} must be {kind.__name__}, got {value!r}"
            )
        kwargs[kwarg] = value
    return factory(**kwargs)


def build_reward_from_spec(spec: Mapping[str, Any]) -> RewardFn:
    """``build_reward`` for a whole ``spec.reward`` mapping: ``{name: ..., <options>}``."""
    if "name" not in spec:
        raise ValueError("reward spec needs a 'name'")
    options = {key: value for key, value in spec.items() if key != "name"}
    return build_reward(spec["name"], options)


def build_run_reward(spec: Any, reward_file: str | None) -> Reward:
    """The reward of a contract ``RewardSpec``: a user's (``reward_file``: where a python
    reward's file is, the run config's ``paths.rewardFile``) or a built-in one."""
    timeout_s = spec.timeout_seconds or DEFAULT_TIMEOUT_S
    concurrency = spec.concurrency or DEFAULT_CONCURRENCY
    if spec.python is not None:
        from grpo_trainer.rewards.python_reward import PythonReward

        if reward_file is None:
            raise ValueError("a python reward needs the reward file's path")
        return PythonReward(reward_file, spec.python.function, timeout_s, concurrency)
    if spec.http is not None:
        from grpo_trainer.rewards.http_reward import HttpReward

        return HttpReward(spec.http.url, spec.http.batch_size, spec.http.max_retries,
                          timeout_s, concurrency)
    return build_reward(spec.name.value, spec.options())


__all__ = [
    "REWARD_NAMES",
    "REWARD_OPTIONS",
    "BatchReward",
    "Reward",
    "RewardFailures",
    "RewardFn",
    "RewardItem",
    "build_reward",
    "build_reward_from_spec",
    "build_run_reward",
    "score_all",
]
