"""Client quota configs as the metadata stores keep them: per entity (a user, a client id, or a user and a client
id, each possibly the ``<default>``) the quota keys set on it.

Names are kept sanitized as Kafka keeps them in ZooKeeper (``Sanitizer``: URL-encoded, ``*`` as ``%2A``, a space
as ``%20``, ``~`` as ``%7E``), so a user or client id that reads ``<default>`` is not the default entity. An entity's
path is Kafka's ``entity_path`` of the config change notices: ``users/<user>``, ``clients/<client-id>``,
``users/<user>/clients/<client-id>``.

Quota keys (Kafka's ``DynamicConfig.User`` and ``DynamicConfig.Client``): ``producer_byte_rate`` and
``consumer_byte_rate`` (bytes per second, whole numbers), ``request_percentage`` (percent of one request thread),
``controller_mutation_rate`` (partition mutations per second).
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from rill.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

DEFAULT = "<default>"
"""Kafka's ``ConfigEntityName.Default``: the default entity of a level."""
USER = "user"
CLIENT_ID = "client-id"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS: Mapping[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: a name safe in a znode path and a metric name."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """``user`` and ``client_id`` are sanitized names, ``DEFAULT``, or None when the entity has no such part."""

    user: str | None = None
    client_id: str | None = None

    @property
    def path(self) -> str:
        if self.user is not None and self.client_id is not None:
            return f"users/{self.user}/clients/{self.client_id}"
        if self.user is not None:
            return f"users/{self.user}"
        return f"clients/{self.client_id}"

    @classmethod
    def from_path(cls, path: str) -> QuotaEntity:
        """The entity of an entity path; ValueError when it names none."""
        parts = path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "users" and parts[1]:
            return cls(parts[1], None)
        if len(parts) == 2 and parts[0] == "clients" and parts[1]:
            return cls(None, parts[1])
        if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
            return cls(parts[1], parts[3])
        raise ValueError(f"{path!r} is not a client quota entity path")

    def components(self) -> list[dict[str, str | None]]:
        """The entity as the protocol writes it: (type, name) pairs, None naming the default."""
        out: list[dict[str, str | None]] = []
        for kind, name in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if name is not None:
                out.append({"entity_type": kind, "entity_name": None if name == DEFAULT else desanitize(name)})
        return out


QuotaChanges = Mapping[QuotaEntity, Mapping[str, float | None]]
"""entity -> quota key -> new value (None: remove it)."""


def entity_from_components(components: list[Mapping[str, str | None]]) -> QuotaEntity:
    """Kafka's checks of an AlterClientQuotas entity: user and/or client-id, each at most once, a name not
    empty (null is the default). INVALID_REQUEST otherwise."""
    if not components:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    found: dict[str, str] = {}
    for c in components:
        kind, name = c["entity_type"], c["entity_name"]
        if kind not in (USER, CLIENT_ID):
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {kind}")
        if kind in found:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate {kind} entity type in the client quota entity")
        if name is not None and not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Empty {kind} not supported")
        found[kind] = DEFAULT if name is None else sanitize(name)
    return QuotaEntity(found.get(USER), found.get(CLIENT_ID))


def check_quota_value(key: str, value: float) -> float:
    """A value for ``key`` as stored: a known key, a whole number for the byte rates, above zero."""
    kind = QUOTA_KEYS.get(key)
    if kind is None:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
    if value != value or value in (float("inf"), float("-inf")):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a finite number")
    if kind == "LONG":
        whole = int(value + 1e-6)
        if abs(whole - value) > 1e-6:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be a Long value")
        value = float(whole)
    if value <= 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Configuration {key} must be greater than 0")
    return value


def format_value(key: str, value: float) -> str:
    """The stored string of a value (Kafka writes the byte rates as whole numbers)."""
    return str(int(value)) if QUOTA_KEYS.get(key) == "LONG" else repr(float(value))


class ClientQuotas:
    """Every entity's quotas; ``version`` moves on at each change, so followers know to look again."""

    def __init__(self) -> None:
        self._entries: dict[QuotaEntity, dict[str, float]] = {}
        self.version = 0

    def __iter__(self) -> Iterator[tuple[QuotaEntity, Mapping[str, float]]]:
        return iter(list(self._entries.items()))

    def get(self, entity: QuotaEntity) -> Mapping[str, float]:
        return self._entries.get(entity, {})

    def apply(self, changes: QuotaChanges) -> None:
        for entity, ops in changes.items():
            values = dict(self._entries.get(entity, {}))
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            self._set(entity, values)
        self.version += 1

    def set_entity(self, entity: QuotaEntity, stored: Mapping[str, str]) -> None:
        """An entity's quotas from its stored config strings (other keys, such as SCRAM credentials, are not
        ours; a value that does not parse is logged and set aside)."""
        values: dict[str, float] = {}
        for key, text in stored.items():
            if key not in QUOTA_KEYS:
                continue
            try:
                values[key] = check_quota_value(key, float(text))
            except (ValueError, KafkaError) as e:
                log.warning("Client quota %s of %s set aside: %r (%s)", key, entity.path, text, e)
        if values != self._entries.get(entity, {}):
            self._set(entity, values)
            self.version += 1

    def _set(self, entity: QuotaEntity, values: dict[str, float]) -> None:
        if values:
            self._entries[entity] = values
        else:
            self._entries.pop(entity, None)

    def to_json(self) -> dict[str, dict[str, float]]:
        return {e.path: dict(v) for e, v in sorted(self._entries.items(), key=lambda kv: kv[0].path)}

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, float]]) -> ClientQuotas:
        out = cls()
        for path, values in data.items():
            try:
                entity = QuotaEntity.from_path(path)
            except ValueError as e:
                log.warning("Client quotas set aside: %s", e)
                continue
            out.set_entity(entity, {k: str(v) for k, v in values.items()})
        return out


def changes_to_json(changes: QuotaChanges) -> dict[str, dict[str, float | None]]:
    return {e.path: dict(ops) for e, ops in changes.items()}


def changes_from_json(data: Mapping[str, Mapping[str, float | None]]) -> dict[QuotaEntity, dict[str, float | None]]:
    """Stored changes; a value that no longer validates is logged and set aside (the change goes on without it)."""
    out: dict[QuotaEntity, dict[str, float | None]] = {}
    for path, ops in data.items():
        try:
            entity = QuotaEntity.from_path(path)
        except ValueError as e:
            log.warning("Client quotas set aside: %s", e)
            continue
        kept: dict[str, float | None] = {}
        for key, value in ops.items():
            try:
                kept[key] = None if value is None else check_quota_value(key, float(value))
            except (KafkaError, ValueError, TypeError) as e:
                log.warning("Client quota %s of %s set aside: %r (%s)", key, path, value, e)
        out[entity] = kept
    return out
