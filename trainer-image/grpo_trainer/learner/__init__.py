"""Learner ranks: the policy update on torch (gloo replicas on CPUs, FSDP2 on GPUs)."""
