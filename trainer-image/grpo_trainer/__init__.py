"""The GRPO trainer that runs inside the trainer image.

Importing the package is cheap (no torch, no Ray); each module imports what it needs. The
algorithm's math (advantages, policy loss, KL, aggregation, logprobs) and the verifiable rewards
are pure functions of tensors and strings, described in ``docs/algorithm.md``.
"""
