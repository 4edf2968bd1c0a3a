"""The rollout ledger's versioned state, saved with every checkpoint and validated strictly.

A step's prompts become prompt groups (``<step>.<position>``) of ``groupSize`` sibling slots.
Each slot is filled by physical attempts, each with its own UUID and a state:

    reserved -> dispatched -> sealed      (generated, scored, journaled)
                           -> failed      (the engine call raised)
    reserved | dispatched | sealed -> abandoned   (a restart, or promptGroup regeneration)

A group is ``generating`` until every slot holds exactly one sealed attempt, then ``sealed``.
Every group is stamped with the weight version (the optimizer step of the weights) that
generates it. Loading refuses unknown fields, another version and inconsistent states: a
sealed attempt without a reward, a reward on an unsealed attempt, two sealed or two live
attempts in one slot, a generating group whose slots are all sealed, a sealed group with an
unsealed slot, a slot outside the group, duplicate ids, a group of another weight version.
"""

from __future__ import annotations

from collections import Counter
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

LEDGER_STATE_VERSION = 1
NonNegative = Annotated[int, Field(ge=0)]


class LedgerStateError(ValueError):
    """A rollout-ledger state that must not be loaded."""


class AttemptState(StrEnum):
    RESERVED = "reserved"
    DISPATCHED = "dispatched"
    SEALED = "sealed"
    FAILED = "failed"
    ABANDONED = "abandoned"


LIVE = (AttemptState.RESERVED, AttemptState.DISPATCHED)


class GroupState(StrEnum):
    GENERATING = "generating"
    SEALED = "sealed"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=False)


class AttemptRecord(_Strict):
    """One physical generation attempt of one sibling slot."""

    id: str = Field(pattern=r"^[0-9a-f]{32}$")
    slot: NonNegative
    state: AttemptState
    reward: float | None = None

    @model_validator(mode="after")
    def _reward_iff_sealed(self) -> AttemptRecord:
        if self.state == AttemptState.SEALED and self.reward is None:
            raise ValueError(f"attempt {self.id}: sealed without a reward")
        if self.state != AttemptState.SEALED and self.reward is not None:
            raise ValueError(f"attempt {self.id}: a reward on a {self.state} attempt")
        return self


class GroupRecord(_Strict):
    """A prompt group: one prompt, ``group_size`` sibling slots, their attempts."""

    id: str = Field(pattern=r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
    prompt_index: NonNegative
    weight_version: NonNegative
    seed: NonNegative
    group_size: int = Field(ge=1)
    state: GroupState
    attempts: list[AttemptRecord] = Field(default_factory=list)

    def sealed_slots(self) -> dict[int, AttemptRecord]:
        return {a.slot: a for a in self.attempts if a.state == AttemptState.SEALED}

    @model_validator(mode="after")
    def _consistent(self) -> GroupRecord:
        sealed = Counter(a.slot for a in self.attempts if a.state == AttemptState.SEALED)
        live = Counter(a.slot for a in self.attempts if a.state in LIVE)
        for a in self.attempts:
            if a.slot >= self.group_size:
                raise ValueError(f"group {self.id}: slot {a.slot} outside groupSize "
                                 f"{self.group_size}")
        if any(n > 1 for n in sealed.values()) or any(n > 1 for n in live.values()):
            raise ValueError(f"group {self.id}: a slot with two sealed or two live attempts")
        if set(sealed) & set(live):
            raise ValueError(f"group {self.id}: a sealed slot with a live attempt")
        complete = len(sealed) == self.group_size
        if self.state == GroupState.GENERATING and complete:
            raise ValueError(f"group {self.id}: generating, but every sibling is sealed")
        if self.state == GroupState.SEALED and not complete:
            raise ValueError(f"group {self.id}: sealed, but not every sibling is")
        return self


class ReuseCounts(_Strict):
    """Cumulative counts (the contract's ``RolloutReuse``)."""

    sealed_groups: NonNegative = 0
    reused_groups: NonNegative = 0
    abandoned_attempts: NonNegative = 0
    batch_shortfall: NonNegative = 0


class LedgerState(_Strict):
    """The ledger as of a checkpoint of step ``weight_version`` (version 1)."""

    version: Literal[1] = LEDGER_STATE_VERSION
    granularity: Literal["sibling", "promptGroup"]
    weight_version: NonNegative
    groups: list[GroupRecord] = Field(default_factory=list)
    counts: ReuseCounts = Field(default_factory=ReuseCounts)
    journal_accounted: dict[str, NonNegative] = Field(default_factory=dict)
    """Bytes of each journal segment that the checkpoint's ledgers include."""

    @model_validator(mode="after")
    def _consistent(self) -> LedgerState:
        ids = [g.id for g in self.groups]
        attempts = [a.id for g in self.groups for a in g.attempts]
        if len(set(ids)) != len(ids) or len(set(attempts)) != len(attempts):
            raise ValueError("duplicate group or attempt id")
        for g in self.groups:
            if g.weight_version != self.weight_version:
                raise ValueError(f"group {g.id} has weight version {g.weight_version}, the "
                                 f"state {self.weight_version}")
        return self

    @classmethod
    def load(cls, text: str | bytes) -> LedgerState:
        """Parse strictly; LedgerStateError says why not."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as err:
            raise LedgerStateError(f"rollout-ledger state rejected: {err}") from None
