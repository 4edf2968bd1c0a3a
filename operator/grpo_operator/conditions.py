"""Setting metav1.Conditions: one per type, kept in its place (so an unchanged status writes
nothing), lastTransitionTime moved only when status moves."""

from __future__ import annotations

import datetime
from typing import Any

from grpo_operator.api.constants import ConditionStatus, ConditionType
from grpo_operator.api.status import MAX_MESSAGE_LENGTH, Condition


def set_condition(
    conditions: list[Condition],
    type_: ConditionType,
    status: bool,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: datetime.datetime,
) -> list[Condition]:
    value = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    previous = next((c for c in conditions if c.type == type_), None)
    moved = previous is None or previous.status != value
    updated = Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message[:MAX_MESSAGE_LENGTH],
        observed_generation=generation,
        last_transition_time=now if moved else previous.last_transition_time,
    )
    return _in_place(conditions, previous, updated)


def set_wire_condition(
    conditions: list[dict[str, Any]],
    type_: ConditionType,
    status: bool,
    reason: str,
    message: str,
    *,
    generation: int | None,
    now: datetime.datetime,
) -> list[dict[str, Any]]:
    """``set_condition`` on the conditions as stored, for a status the models may not read
    (the other entries are kept as they are)."""
    value = ConditionStatus.TRUE if status else ConditionStatus.FALSE
    previous = next((c for c in conditions if c.get("type") == type_), None)
    kept = previous.get("lastTransitionTime") if previous and previous.get("status") == value \
        else None
    updated = Condition(
        type=type_, status=value, reason=reason, message=message[:MAX_MESSAGE_LENGTH],
        observed_generation=generation, last_transition_time=kept or now,
    ).to_wire()
    return _in_place(conditions, previous, updated)


def _in_place(conditions: list[Any], previous: Any, updated: Any) -> list[Any]:
    if previous is None:
        return [*conditions, updated]
    return [updated if c is previous else c for c in conditions]
