"""A small declaration language for Kafka protocol messages.

A message is declared once, for all its versions, the way Kafka's own message specs describe it::

    FOO_RESPONSE = message("FooResponse", 99, "0-3", "2+", [
        field("ErrorCode", "int16", "0+"),
        field("Topics", "[]FooTopic", "0+", fields=[
            field("Name", "string", "0+", nullable="1+"),
            field("LeaderEpoch", "int32", "3+", default=-1),
        ]),
        field("Extra", "int64", "2+", tag=0, default=-1),
    ])

Version ranges are written as Kafka writes them: ``"3"``, ``"0-2"``, ``"5+"``, or ``"none"``. Field types are
the protocol's primitive names (``bool int8 int16 uint16 int32 uint32 int64 float64 uuid string bytes
records``), ``"[]T"`` for an array of T, or a struct name (capitalised) with ``fields=`` for a struct. A
field with ``tag=`` is a tagged field (KIP-482) in the versions where it exists. Bodies are dicts keyed by
the snake_case form of each field name (``TopicId`` -> ``topic_id``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from functools import cache

NO_MAX = 0x7FFF

PRIMITIVES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "float64",
        "uuid",
        "string",
        "bytes",
        "records",
    }
)


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of versions; ``high == NO_MAX`` means open-ended ("5+")."""

    low: int
    high: int

    @classmethod
    def parse(cls, spec: str) -> VersionRange | None:
        spec = spec.strip()
        if spec == "none":
            return None
        if spec.endswith("+"):
            return cls(int(spec[:-1]), NO_MAX)
        if "-" in spec:
            low, high = spec.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(spec), int(spec))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    def __str__(self) -> str:
        if self.high == NO_MAX:
            return f"{self.low}+"
        if self.low == self.high:
            return str(self.low)
        return f"{self.low}-{self.high}"


def in_range(r: VersionRange | None, version: int) -> bool:
    return r is not None and r.low <= version <= r.high


_CAMEL_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL_2 = re.compile(r"([a-z0-9])([A-Z])")


@cache
def snake_case(name: str) -> str:
    """``TopicId`` -> ``topic_id``, ``leaderEpoch`` -> ``leader_epoch``, ``ISRNodes`` -> ``isr_nodes``."""
    return _CAMEL_2.sub(r"\1_\2", _CAMEL_1.sub(r"\1_\2", name)).lower()


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: object = _Unset()


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str
    versions: VersionRange
    nullable: VersionRange | None = None
    tag: int | None = None
    tagged: VersionRange | None = None
    default: object = UNSET
    fields: tuple[Field, ...] = ()
    key: str = dc_field(default="", compare=False)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        """The type of one element for arrays, the type itself otherwise."""
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        """A struct or an array of structs."""
        return self.element_type not in PRIMITIVES

    def is_tagged(self, version: int) -> bool:
        return in_range(self.tagged, version)

    def is_nullable(self, version: int) -> bool:
        return in_range(self.nullable, version)


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    api_key: int | None
    versions: VersionRange
    flexible: VersionRange | None
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return in_range(self.flexible, version)


def field(
    name: str,
    type: str,
    versions: str,
    *,
    nullable: str | None = None,
    tag: int | None = None,
    tagged: str | None = None,
    default: object = UNSET,
    fields: Sequence[Field] = (),
) -> Field:
    """Declare one field (see the module docstring)."""
    vr = VersionRange.parse(versions)
    if vr is None:
        raise ValueError(f"field {name} exists in no version")
    tagged_range = VersionRange.parse(tagged) if tagged is not None else (vr if tag is not None else None)
    base = type[2:] if type.startswith("[]") else type
    if base not in PRIMITIVES and not fields:
        raise ValueError(f"struct field {name} of type {type} declares no fields")
    if base in PRIMITIVES and fields:
        raise ValueError(f"primitive field {name} of type {type} cannot have fields")
    return Field(
        name=name,
        type=type,
        versions=vr,
        nullable=VersionRange.parse(nullable) if nullable is not None else None,
        tag=tag,
        tagged=tagged_range,
        default=default,
        fields=tuple(fields),
        key=snake_case(name),
    )


def message(name: str, api_key: int | None, versions: str, flexible: str, fields: Sequence[Field]) -> Message:
    """Declare one message: a request, a response, or a data payload (api_key None)."""
    vr = VersionRange.parse(versions)
    if vr is None:
        raise ValueError(f"message {name} has no versions")
    return Message(name, api_key, vr, VersionRange.parse(flexible), tuple(fields))
