"""The status patch: a JSON merge patch that also removes what the new status dropped."""

from __future__ import annotations

from grpo_operator.kube import controlled_by, merge_patch


def apply(doc: dict, patch: dict) -> dict:
    """RFC 7386 applied, as the API server does."""
    out = dict(doc)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = apply(out[key], value)
        else:
            out[key] = value
    return out


def test_merge_patch_sends_changes_and_nulls_for_dropped_fields():
    old = {"phase": "Failed", "terminal": {"reason": "X"}, "ledger": {"a": 1, "b": 2},
           "conditions": [{"type": "Failed"}]}
    new = {"phase": "Recovering", "ledger": {"a": 1, "c": 3},
           "conditions": [{"type": "Failed"}, {"type": "Recovering"}]}
    patch = merge_patch(old, new)
    assert patch == {"phase": "Recovering", "terminal": None, "ledger": {"b": None, "c": 3},
                     "conditions": [{"type": "Failed"}, {"type": "Recovering"}]}
    assert apply(old, patch) == new
    assert merge_patch(new, new) == {}


def test_a_child_counts_only_when_this_run_controls_it():
    mine = {"metadata": {"ownerReferences": [{"uid": "u-1", "controller": True}]}}
    assert controlled_by(mine, "u-1")
    assert not controlled_by(mine, "u-2")
    assert not controlled_by({"metadata": {"ownerReferences": [{"uid": "u-1"}]}}, "u-1")
    assert not controlled_by({"metadata": {}}, "u-1")
