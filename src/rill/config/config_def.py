"""Config definitions: types, sources, validators, and the ConfigDef registry that parses strings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
_LIMITS = {"INT": (-(2**31), INT_MAX), "SHORT": (-(2**15), 2**15 - 1), "LONG": (-(2**63), LONG_MAX)}


class ConfigType(IntEnum):
    """Config types, numbered as in DescribeConfigs v3+."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a config value comes from, numbered as in DescribeConfigs."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class Importance(Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


# Short names for the tables of definitions (definitions.py and the modules that define into its tables).
B, S, INT, SHORT, LONG = ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.SHORT, ConfigType.LONG
D, LST, P = ConfigType.DOUBLE, ConfigType.LIST, ConfigType.PASSWORD
HIGH, MEDIUM, LOW = Importance.HIGH, Importance.MEDIUM, Importance.LOW


class ConfigError(ValueError):
    """A broker configuration problem; the message names the key."""


Validator = Callable[[Any], str | None]
"""Returns a problem description, or None when the parsed value is fine."""


def at_least(low: float) -> Validator:
    return lambda v: None if v >= low else f"must be at least {low}"


def between(low: float, high: float) -> Validator:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def one_of(*choices: str, ignore_case: bool = False) -> Validator:
    folded = {c.lower() for c in choices} if ignore_case else set(choices)

    def check(v: Any) -> str | None:
        key = v.lower() if ignore_case and isinstance(v, str) else v
        return None if key in folded else f"must be one of {', '.join(choices)}"

    return check


def all_of(*choices: str) -> Validator:
    def check(v: Any) -> str | None:
        bad = [x for x in v if x not in choices]
        return f"{', '.join(bad)} not in {', '.join(choices)}" if bad else None

    return check


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One config's definition. ``default`` is the parsed default; None means no default (null)."""

    name: str
    type: ConfigType
    default: Any
    validator: Validator | None
    importance: Importance
    dynamic: bool
    doc: str

    def parse(self, raw: Any) -> Any:
        """Parse a string (or an already typed value) and validate it; ValueError explains a bad one."""
        value = _parse(self.type, raw)
        if self.validator is not None and value is not None:
            problem = self.validator(value)
            if problem:
                raise ValueError(problem)
        return value

    def to_string(self, value: Any) -> str | None:
        if value is None:
            return None
        if self.type is ConfigType.BOOLEAN:
            return "true" if value else "false"
        if self.type is ConfigType.LIST:
            return ",".join(str(v) for v in value)
        return str(value)


def _parse(kind: ConfigType, raw: Any) -> Any:
    if raw is None:
        return None
    if kind is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise ValueError("expected true or false")
        return text == "true"
    if kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        if isinstance(raw, bool):
            raise ValueError("expected an integer")
        try:
            value = raw if isinstance(raw, int) else int(str(raw).strip())
        except ValueError:
            raise ValueError("expected an integer") from None
        low, high = _LIMITS[kind.name]
        if not low <= value <= high:
            raise ValueError(f"out of range for type {kind.name.lower()}")
        return value
    if kind is ConfigType.DOUBLE:
        try:
            return float(raw)
        except ValueError:
            raise ValueError("expected a number") from None
    if kind is ConfigType.LIST:
        items = raw if isinstance(raw, list | tuple) else str(raw).split(",")
        return [s.strip() for s in items if str(s).strip()]
    return str(raw).strip()


class ConfigDef:
    """A registry of config definitions, in definition order."""

    def __init__(self) -> None:
        self.keys: dict[str, ConfigKey] = {}

    def define(
        self,
        name: str,
        kind: ConfigType,
        default: Any,
        doc: str,
        validator: Validator | None = None,
        importance: Importance = Importance.MEDIUM,
        dynamic: bool = False,
    ) -> ConfigDef:
        key = ConfigKey(name, kind, None, validator, importance, dynamic, doc)
        parsed = key.parse(default) if default is not None else None
        self.keys[name] = ConfigKey(name, kind, parsed, validator, importance, dynamic, doc)
        return self

    def __contains__(self, name: object) -> bool:
        return name in self.keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self.keys[name]
