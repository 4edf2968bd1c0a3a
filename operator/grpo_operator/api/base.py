"""The base model of the API and the shared field types.

Every cross-field rule is written once, as a `Rule`: its CEL expression goes into the CRD's
`x-kubernetes-validations`, its Python predicate runs in the model's validator, so the API
server and the models refuse the same manifests with the same message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import UnionType
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "AbsolutePath",
    "ApiModel",
    "DNSLabel",
    "DNSSubdomain",
    "ParquetPath",
    "Quantity",
    "RelativePath",
    "Rule",
    "Sha256",
    "StrictBool",
    "StrictFloat",
    "StrictInt",
    "StrictStr",
    "Timestamp",
    "TransitionRule",
    "schema_version_type",
]


@dataclass(frozen=True)
class Rule:
    """A validation rule of one object, in CEL (for the API server) and in Python.

    `check` receives the validated model instance; `field_path` (e.g. ".miniBatchSize") is
    where the API server reports the error. The message names the field. `cel` is None for
    rules of documents that are not API objects (the trainer's report).
    """

    cel: str | None
    message: str
    check: Callable[[Any], bool]
    field_path: str | None = None

    def to_crd(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out


@dataclass(frozen=True)
class TransitionRule:
    """A rule comparing an object with its previous version (`oldSelf`), e.g. immutability.

    `check(old, new)` receives both model instances. `frozen` names the field paths (relative
    to the object, camelCase, dotted) the rule freezes; `raise_only` those that may only grow;
    `one_way` booleans that may be set to true but not back.
    """

    cel: str
    message: str
    check: Callable[[Any, Any], bool]
    field_path: str | None = None
    frozen: tuple[str, ...] = ()
    raise_only: tuple[str, ...] = ()
    one_way: tuple[str, ...] = ()

    def to_crd(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out


class RuleViolation(ValueError):
    """One or more `Rule`s of an object failed."""


def _schema_extra(schema: dict[str, Any], cls: type[ApiModel]) -> None:
    """Adds the rules, and the defaults of nested objects (pydantic leaves out factories).

    A nested object's default is written without the values its own schema defaults, so a
    section defaulted to `{}` gets its fields' defaults from the API server's defaulting.
    """
    rules = [r.to_crd() for r in (*cls.RULES, *cls.TRANSITION_RULES) if r.cel is not None]
    if rules:
        schema["x-kubernetes-validations"] = rules
    for name, field in cls.model_fields.items():
        factory = field.default_factory
        if factory is None:
            continue
        value = factory()  # type: ignore[call-arg]
        if isinstance(value, ApiModel):
            prop = schema["properties"][field.alias or name]
            prop["default"] = value.model_dump(by_alias=True, exclude_defaults=True, mode="json")


def _is_integer(annotation: Any) -> bool:
    """int, optionally Annotated and/or Optional."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_integer(get_args(annotation)[0])
    if origin in (Union, UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return len(members) == 1 and _is_integer(members[0])
    return annotation is int


class ApiModel(BaseModel):
    """Base of every API object: camelCase on the wire, unknown fields refused, rules checked.

    A null value is treated as absent, as the API server does for fields that are not
    nullable (it prunes nulls before defaulting).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        json_schema_extra=_schema_extra,
    )
    RULES: ClassVar[tuple[Rule, ...]] = ()
    TRANSITION_RULES: ClassVar[tuple[TransitionRule, ...]] = ()
    _INTEGER_KEYS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        keys = set()
        for name, field in cls.model_fields.items():
            if _is_integer(field.annotation):
                keys |= {name, field.alias or name}
        cls._INTEGER_KEYS = frozenset(keys)

    @model_validator(mode="before")
    @classmethod
    def _as_the_api_server_reads(cls, data: Any) -> Any:
        """Nulls are unset, and an integral number (4.0) is an integer, as on the API server
        (it stores 4.0 as 4)."""
        if not isinstance(data, dict):
            return data
        out = {}
        for key, value in data.items():
            if value is None:
                continue
            if key in cls._INTEGER_KEYS and isinstance(value, float) and value.is_integer():
                value = int(value)
            out[key] = value
        return out

    @model_validator(mode="after")
    def _check_rules(self) -> ApiModel:
        failed = [rule.message for rule in type(self).RULES if not rule.check(self)]
        if failed:
            raise RuleViolation("; ".join(failed))
        return self

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- Field types --------------------------------------------------------------------------------

DNS1123_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# resource.Quantity's serialized form, without a sign: resources are never negative.
QUANTITY_PATTERN = (
    r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_SEGMENT = r"[A-Za-z0-9._+=@,-]+"
RELATIVE_PATH_PATTERN = rf"^{_SEGMENT}(/{_SEGMENT})*$"
ABSOLUTE_PATH_PATTERN = rf"^(/{_SEGMENT})+$"
PARQUET_PATH_PATTERN = rf"^{_SEGMENT}(/{_SEGMENT})*\.parquet$"
# "." and ".." segments would let a path leave its volume.
_NO_DOT_SEGMENTS_CEL = "!('/' + self + '/').contains('/../') && !('/' + self + '/').contains('/./')"


def _no_dot_segments(path: str) -> str:
    if any(segment in (".", "..") for segment in path.split("/")):
        raise ValueError("path must not contain '.' or '..' segments")
    return path


def _quantity_from_int(value: Any) -> Any:
    # YAML `cpu: 4` arrives as an int; the CRD types quantities int-or-string, like core/v1.
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a quantity must not be negative")
        return str(value)
    return value


_PATH_CEL = {
    "x-kubernetes-validations": [
        {"rule": _NO_DOT_SEGMENTS_CEL, "message": "path must not contain '.' or '..' segments"}
    ]
}

RelativePath = Annotated[
    StrictStr,
    Field(min_length=1, max_length=512, pattern=RELATIVE_PATH_PATTERN, json_schema_extra=_PATH_CEL),
    AfterValidator(_no_dot_segments),
]
ParquetPath = Annotated[
    StrictStr,
    Field(min_length=9, max_length=512, pattern=PARQUET_PATH_PATTERN, json_schema_extra=_PATH_CEL),
    AfterValidator(_no_dot_segments),
]
AbsolutePath = Annotated[
    StrictStr,
    Field(min_length=2, max_length=512, pattern=ABSOLUTE_PATH_PATTERN, json_schema_extra=_PATH_CEL),
    AfterValidator(_no_dot_segments),
]
DNSSubdomain = Annotated[
    StrictStr, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN_PATTERN)
]
DNSLabel = Annotated[StrictStr, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL_PATTERN)]
Sha256 = Annotated[StrictStr, Field(min_length=64, max_length=64, pattern=r"^[a-f0-9]{64}$")]
# Field before BeforeValidator: in the other order pydantic leaves the pattern out of the JSON
# Schema (and so out of the CRD), while still enforcing it.
Quantity = Annotated[
    StrictStr,
    Field(
        max_length=64,
        pattern=QUANTITY_PATTERN,
        json_schema_extra={"x-kubernetes-int-or-string": True},
    ),
    BeforeValidator(_quantity_from_int),
]


def _timestamp_input(value: Any) -> Any:
    # RFC 3339 text (or a datetime in Python); pydantic would also take a number as Unix time.
    if not isinstance(value, str | datetime):
        raise ValueError("a timestamp must be an RFC 3339 string")
    return value


Timestamp = Annotated[AwareDatetime, BeforeValidator(_timestamp_input)]
"""An RFC 3339 timestamp with a time zone (what metav1.Time serialises to)."""


def schema_version_type(version: int) -> Any:
    """The type of a document's `schemaVersion` field: exactly `version`, an integer."""

    def check(value: int) -> int:
        if value != version:
            raise ValueError(f"schemaVersion must be {version}, got {value}")
        return value

    return Annotated[StrictInt, AfterValidator(check), Field(ge=version, le=version)]
