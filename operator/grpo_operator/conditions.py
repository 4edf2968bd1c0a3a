"""Setting metav1.Conditions: one per type, kept in its place (so an unchanged status writes
nothing), lastTransitionTime moved only when status moves; and the kstatus summary of a run."""

from __future__ import annotations

import datetime
from typing import Any

from grpo_operator.api.constants import ConditionStatus, ConditionType, Phase
from grpo_operator.api.status import MAX_MESSAGE_LENGTH, Condition, GRPORunStatus


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


def summarize(status: GRPORunStatus, *, generation: int | None,
              now: datetime.datetime) -> None:
    """Set the conditions kstatus reads (Flux, kpt and cli-utils judge a resource by them):
    Reconciling True while the run works toward its end, Stalled True once it ended Failed or
    Cancelled, Ready True once it Succeeded (and False before: kstatus then reads InProgress,
    a suspended run included). A Stalled the operator set because its passes fail is kept, and
    holds Reconciling False: kstatus takes the first of the two it finds True."""
    phase, terminal = status.phase, status.terminal

    def put(type_: ConditionType, value: bool, reason: str, message: str) -> None:
        status.conditions = set_condition(status.conditions, type_, value, reason, message,
                                          generation=generation, now=now)

    if phase is not None and phase.is_terminal:
        reason = terminal.reason if terminal else str(phase)
        message = terminal.message if terminal else ""
        ended_well = phase == Phase.SUCCEEDED
        put(ConditionType.STALLED, not ended_well, reason, message)
        put(ConditionType.RECONCILING, False, reason, message)
        put(ConditionType.READY, ended_well, reason, message)
        return
    stalled = status.condition(ConditionType.STALLED)
    failing = stalled is not None and stalled.status == ConditionStatus.TRUE
    reason, progress = str(phase or Phase.PENDING), _progress(status)
    if failing:
        put(ConditionType.RECONCILING, False, stalled.reason, stalled.message)
    else:
        put(ConditionType.RECONCILING, phase != Phase.SUSPENDED, reason, progress)
    # A suspended run is at rest, not done: kstatus reads its Ready=False as InProgress.
    put(ConditionType.READY, False, reason, progress)


def _progress(status: GRPORunStatus) -> str:
    ledger = status.ledger
    return f"{str(status.phase or Phase.PENDING).lower()}: step {ledger.completed_steps}" + (
        f"/{ledger.planned_steps}" if ledger.planned_steps else "")
