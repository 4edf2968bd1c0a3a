"""Rollout recovery: the prompt-group lineage ledger (``ledger``, its saved ``state``) and the
append-only journal of sealed rollouts (``journal``)."""
