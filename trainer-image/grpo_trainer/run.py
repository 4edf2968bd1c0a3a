"""``python -m grpo_trainer run --config FILE``: train, then write the final model.

The config file is the contract's ``RunConfig`` JSON (``grpo_operator.api.run_config``), parsed
once here. Ray: with ``RAY_ADDRESS`` set (a Ray job on the RayCluster) the trainer joins that
cluster, otherwise ``ray.init()`` starts a local one for the process's lifetime. The final
model is written as a Hugging Face directory (config, safetensors, tokenizer) to the run's
``artifact/`` directory (``CheckpointLayout``), sealed with its digest manifest. The trainer's
reports (``reporting.py``) go to stdout, where the driver relays them. Frozen inputs,
checkpoints, resume, the rollout journal, the budget and SIGTERM are ``attempt.py``'s
(``docs/durability.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from grpo_operator.api.exit_codes import ExitCode
from grpo_operator.api.run_config import RUN_CONFIG_ENV, RUN_CONFIG_PATH
from grpo_trainer.driver.outcome import announce_exit

log = logging.getLogger("grpo_trainer.run")

def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``run`` subcommand."""
    p = subparsers.add_parser(
        "run",
        help="train (local Ray unless RAY_ADDRESS is set) and write the final model",
        description="Run GRPO as the run config says and write the final model (Hugging Face "
        "directory) to <checkpoint dir>/artifact.",
    )
    p.add_argument(
        "--config", type=Path, default=None,
        help=f"the run config JSON (default: ${RUN_CONFIG_ENV}, else {RUN_CONFIG_PATH})",
    )
    p.set_defaults(handler=main)


@contextlib.contextmanager
def start_run(spec, model_dir: str, train_file: str, reward_fn=None, cpu_learner_ranks=None,
              validation_file: str | None = None, reward_file: str | None = None,
              **trainer_options):
    """Build the data, reward, placement group, learner ranks and engines of ``spec`` (a
    ``GRPORunSpec``) on the current Ray cluster, yield a ``Trainer`` (``trainer_options``:
    its ``after_step``, ``rollouts``, ``gates``, ``on_tokens``, ``interrupt``), tear
    everything down. With ``validation_file`` the trainer evaluates as the spec says;
    ``reward_file`` is a python reward's file; ``reward_fn`` replaces the spec's reward (and
    stays the caller's to close)."""
    import ray
    from transformers import AutoTokenizer

    from grpo_trainer.data import load_prompts
    from grpo_trainer.evaluation import Evaluator
    from grpo_trainer.learner.actor import LearnerSettings
    from grpo_trainer.learner.group import LearnerGroup
    from grpo_trainer.placement import create_placement_group, describe, plan_placement
    from grpo_trainer.rewards import BatchReward, build_run_reward
    from grpo_trainer.rollout.engine import EngineSettings
    from grpo_trainer.rollout.pool import EnginePool
    from grpo_trainer.trainer import Trainer, TrainerConfig

    algorithm, rollout, resources = spec.algorithm, spec.rollout, spec.resources
    config = TrainerConfig.from_spec(spec)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dataset = load_prompts(train_file, tokenizer, algorithm.max_prompt_tokens)
    if dataset.dropped_too_long:
        log.warning("dropped %d prompts longer than maxPromptTokens", dataset.dropped_too_long)
    own_reward = reward_fn is None
    reward_fn = reward_fn or build_run_reward(spec.reward, reward_file)
    evaluator = None
    if validation_file is not None:
        validation = load_prompts(validation_file, tokenizer, algorithm.max_prompt_tokens)
        evaluator = Evaluator.for_spec(spec, validation, reward_fn)
    plan = plan_placement(
        rollout.placement.value,
        rollout.tensor_parallel_size,
        resources.workers,
        resources.gpus_per_worker,
        cpu_learner_ranks,
    )
    group = create_placement_group(plan)
    log.info("placement %s: %s", rollout.placement.value, json.dumps(describe(plan, group)))
    learner_settings = LearnerSettings.from_spec(spec, model_dir, config.algorithm, plan.use_gpu)
    engine_settings = EngineSettings(
        model_dir=model_dir,
        max_model_len=rollout.max_model_len
        or algorithm.max_prompt_tokens + algorithm.max_response_tokens,
        dtype=rollout.dtype.value,
        tensor_parallel_size=rollout.tensor_parallel_size,
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        enable_sleep_mode=plan.colocated,
        seed=algorithm.seed,
        use_gpu=plan.use_gpu,
    )
    # The engines start (imports, model, KV cache: the longest part of a start) while the
    # learners load, except when both share GPUs: vLLM sizes its KV cache from the GPU memory
    # it finds free at start, so the learners' weights must be in place first.
    engines_after_learners = plan.colocated and plan.use_gpu
    learners = engines = None
    try:
        if not engines_after_learners:
            engines = EnginePool(engine_settings, plan.engines, group)
        learners = LearnerGroup(learner_settings, plan.learners, group)
        if engines_after_learners:
            engines = EnginePool(engine_settings, plan.engines, group)
        engines.wait_ready()
        pad_id = tokenizer.pad_token_id
        pad_id = tokenizer.eos_token_id if pad_id is None else pad_id
        yield Trainer(config, dataset, reward_fn, engines, learners, pad_id or 0, plan.colocated,
                      evaluator=evaluator, **trainer_options)
    finally:
        if engines is not None:
            engines.shutdown()
        if learners is not None:
            learners.shutdown()
        ray.util.remove_placement_group(group)
        if own_reward and isinstance(reward_fn, BatchReward):
            reward_fn.close()


@contextlib.contextmanager
def ray_session(num_cpus: int | None = None) -> Iterator[None]:
    """Join the cluster in RAY_ADDRESS, or start a local one (of ``num_cpus`` CPUs; default
    the machine's) and stop it afterwards."""
    import os

    import ray

    if ray.is_initialized():
        yield
        return
    # Explicitly "local" without RAY_ADDRESS: never attach to some other `ray start` cluster
    # that happens to run on the machine.
    ray.init(address=os.environ.get("RAY_ADDRESS") or "local", include_dashboard=False,
             num_cpus=num_cpus)
    try:
        yield
    finally:
        ray.shutdown()


def main(args: argparse.Namespace) -> int:
    """Train as the run config says; every exit is announced (``announce_exit``) so the driver
    learns the code even from a job Ray marks STOPPED."""
    try:
        code = _train(args)
    except Exception:  # a lost actor, an engine error, a bug: resume from the checkpoint
        log.exception("the attempt failed")
        code = ExitCode.RETRYABLE_FAILURE
    announce_exit(int(code))
    return int(code)


def _train(args: argparse.Namespace) -> ExitCode:
    from grpo_operator.api.run_config import (
        IncompatibleContractError,
        RunConfig,
        RunConfigError,
    )
    from grpo_trainer.attempt import run_attempt
    from grpo_trainer.reporting import Reporter
    from grpo_trainer.signals import StopRequest

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    try:
        config = RunConfig.load(args.config)
    except IncompatibleContractError as err:
        log.error("incompatible run config: %s", err)
        return ExitCode.INCOMPATIBLE_CONTRACT
    except RunConfigError as err:
        log.error("invalid run config: %s", err)
        return ExitCode.INVALID_INPUT
    paths = config.paths
    stop = StopRequest()

    @contextlib.contextmanager
    def start(**trainer_options):
        # Ray starts only once the inputs are verified; the SIGTERM handler goes in after
        # ray.init, which installs its own for a local cluster.
        with ray_session(), stop.installed(), start_run(
            config.spec, paths.model_dir, paths.train_file,
            validation_file=paths.validation_file, reward_file=paths.reward_file,
            **trainer_options
        ) as trainer:
            yield trainer

    return run_attempt(config, start, Reporter(config.attempt), stop)
