"""Setting metav1.Conditions: one per type, lastTransitionTime moved only when status moves."""

from __future__ import annotations

import datetime

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
    return [c for c in conditions if c.type != type_] + [updated]
