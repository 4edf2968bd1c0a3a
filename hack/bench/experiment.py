"""The trainer benchmark's experiments: one definition from which both sides are configured.

``Experiment`` holds every setting that both this trainer and TRL's ``GRPOTrainer`` must
share; ``algorithm()`` renders it as a GRPORun ``spec.algorithm`` (camelCase) and
``trl_config()`` as ``GRPOConfig`` keyword arguments, so the two cannot drift apart (the tests
check the mapping field by field). Pure Python: it is imported in .venv and in the TRL venv.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Experiment:
    """A small GRPO task on a toy Llama (``grpo_trainer.toy``), the letters dataset and the
    dense ``char_fraction`` reward (a 0/1 reward scores 0 on a random model: no gradient)."""

    name: str
    hidden_size: int
    num_layers: int
    prompts_per_step: int
    group_size: int
    max_response_tokens: int
    micro_batch_size: int  # sequences per forward/backward, both sides
    vocab_size: int = 400
    train_rows: int = 64
    max_prompt_tokens: int = 32
    kl_coef: float = 0.01  # > 0: both sides load and run a reference model
    learning_rate: float = 1e-4
    max_grad_norm: float = 1.0
    clip_ratio: float = 0.2
    temperature: float = 1.0
    top_p: float = 1.0
    warmup_steps: int = 1
    timed_steps: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sequences_per_step % self.micro_batch_size:
            raise ValueError(f"{self.name}: micro-batch must divide the step's sequences")

    @property
    def sequences_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.timed_steps

    def algorithm(self) -> dict:
        """This trainer's ``spec.algorithm``: one optimizer step per GRPO step. The dual clip
        stays at its default (TRL has none; it changes no work done)."""
        return {
            "maxSteps": self.total_steps,
            "groupSize": self.group_size,
            "promptsPerStep": self.prompts_per_step,
            "ppoEpochs": 1,
            "miniBatchSize": self.sequences_per_step,
            "microBatchSize": self.micro_batch_size,
            "learningRate": self.learning_rate,
            "maxGradNorm": self.max_grad_norm,
            "klCoef": self.kl_coef,
            "klEstimator": "k3",
            "clipRatioLow": self.clip_ratio,
            "clipRatioHigh": self.clip_ratio,
            "lossAggregation": "token-mean",
            "normalizeAdvantageByStd": True,
            "maxPromptTokens": self.max_prompt_tokens,
            "maxResponseTokens": self.max_response_tokens,
            "temperature": self.temperature,
            "topP": self.top_p,
            "seed": self.seed,
        }

    def trl_config(self) -> dict:
        """``GRPOConfig`` arguments for the same experiment. TRL counts its batch in
        completions: ``micro`` per forward, accumulated over the step's sequences, generated
        once per optimizer step (``steps_per_generation`` defaults to the accumulation)."""
        return {
            "max_steps": self.total_steps,
            "num_generations": self.group_size,
            "per_device_train_batch_size": self.micro_batch_size,
            "gradient_accumulation_steps": self.sequences_per_step // self.micro_batch_size,
            "num_iterations": 1,
            "learning_rate": self.learning_rate,
            "lr_scheduler_type": "constant",  # ours has no schedule
            "weight_decay": 0.0,  # algorithm.weightDecay's default, on both sides
            "optim": "adamw_torch",  # torch.optim.AdamW, as the learner ranks
            "max_grad_norm": self.max_grad_norm,
            "beta": self.kl_coef,  # TRL's KL term is the k3 estimator
            "epsilon": self.clip_ratio,
            "epsilon_high": self.clip_ratio,
            "loss_type": "dapo",  # token-mean over the step's global token count
            "scale_rewards": "group",
            "max_completion_length": self.max_response_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "bf16": False,  # TRL's default is bf16; both sides run float32
            "gradient_checkpointing": False,  # TRL's default is on; the learner has none
        }

    def to_dict(self) -> dict:
        return asdict(self)


EXPERIMENTS = (
    # The tests' and the demo's model (toy.make_tiny_model's defaults): ~0.5M parameters.
    Experiment("tiny", hidden_size=128, num_layers=2, prompts_per_step=8, group_size=8,
               max_response_tokens=32, micro_batch_size=16),
    # The same recipe, bigger: ~25M parameters. Half the tiny run's prompts per step, so that
    # the whole benchmark stays near 15 minutes on 2 cores (this trainer took ~30 s per step
    # here at 8 x 8).
    Experiment("25M", hidden_size=512, num_layers=10, prompts_per_step=4, group_size=8,
               max_response_tokens=64, micro_batch_size=16),
)


def by_name(name: str) -> Experiment:
    return next(e for e in EXPERIMENTS if e.name == name)
