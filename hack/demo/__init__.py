"""``make demo``: a real GRPO run on this machine, driven by the operator on the local cluster."""
