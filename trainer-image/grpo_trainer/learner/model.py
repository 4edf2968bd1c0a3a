"""How a learner rank builds its models: float32 master weights, no dropout, and, for the
policy, optional gradient checkpointing. Mixed precision is applied when the model is wrapped
for data parallelism (``learner.parallel``).

Dropout is turned off in the policy and the reference, training included: GRPO's importance
ratio is 1 on-policy only if the update's forward computes the same function as the pass that
gave the old logprobs (TRL's ``disable_dropout``, OpenRLHF's default). nn.Dropout modules get
p = 0 and attention modules their ``attention_dropout`` 0 (Hugging Face attention applies it
only in train mode, which gradient checkpointing needs).
"""

from __future__ import annotations

import types

import torch

COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def load_model(model_dir: str, device: torch.device, trainable: bool,
               gradient_checkpointing: bool = False) -> torch.nn.Module:
    """The Hugging Face causal LM in ``model_dir``, in float32, without dropout; trainable (in
    train mode, with gradients) or frozen (eval mode)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    disable_dropout(model)
    if trainable and gradient_checkpointing:
        # Non-reentrant: works with frozen inputs and FSDP2, and is torch's recommended kind.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train(trainable)
    model.requires_grad_(trainable)
    return model


def disable_dropout(model: torch.nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def autocast_forward(model: torch.nn.Module, device_type: str, dtype: torch.dtype) -> None:
    """Run ``model``'s forward under ``torch.autocast`` (its backward then follows the
    forward's dtypes); parameters, gradients and optimizer state stay as they are (float32).
    Accelerate's mixed-precision idiom."""
    forward = type(model).forward
    model.forward = types.MethodType(torch.autocast(device_type, dtype=dtype)(forward), model)
