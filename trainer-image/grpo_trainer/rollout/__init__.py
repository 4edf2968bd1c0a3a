"""Rollout: vLLM engines as Ray actors and the weight sync into them."""
