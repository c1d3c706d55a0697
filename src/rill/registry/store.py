"""The registry's state, rebuilt from the records of the ``_schemas`` topic (no I/O here).

The topic is a compacted key-value log; keys and values are JSON with the field names of Confluent's
registry, so the latest value of each key is the truth and compaction never changes the state:

- ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}`` -> ``{"subject","version","id","schemaType",
  "schema","references","deleted"}``; a null value (tombstone) is the permanent delete of that version.
- ``{"keytype":"CONFIG","subject":S|null,"magic":0}`` -> ``{"compatibilityLevel": LEVEL}``; null: unset.
- ``{"keytype":"MODE","subject":S|null,"magic":0}`` -> ``{"mode": MODE}``; null: unset.

Records this module does not understand are skipped, so a newer writer cannot crash an older reader.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from rill.registry.schemas import AVRO, COMPATIBILITY_LEVELS, DEFAULT_COMPATIBILITY, Reference, SchemaText, render

log = logging.getLogger(__name__)

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"

Record = tuple[bytes, bytes | None]


@dataclass(frozen=True, slots=True)
class Version:
    subject: str
    version: int
    schema_id: int
    schema: SchemaText
    deleted: bool

    def to_json(self, fmt: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema_id,
            "schema": render(self.schema, fmt),
        }
        if self.schema.schema_type != AVRO:
            out["schemaType"] = self.schema.schema_type
        if self.schema.references:
            out["references"] = [r.to_json() for r in self.schema.references]
        return out


def _key(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=False).encode()


def schema_record(v: Version) -> Record:
    key = _key({"keytype": "SCHEMA", "subject": v.subject, "version": v.version, "magic": 1})
    value = {
        "subject": v.subject,
        "version": v.version,
        "id": v.schema_id,
        "schemaType": v.schema.schema_type,
        "schema": v.schema.text,
        "references": [r.to_json() for r in v.schema.references],
        "deleted": v.deleted,
    }
    return key, json.dumps(value, separators=(",", ":")).encode()


def schema_tombstone(subject: str, version: int) -> Record:
    return _key({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}), None


def config_record(subject: str | None, level: str | None) -> Record:
    key = _key({"keytype": "CONFIG", "subject": subject, "magic": 0})
    return key, None if level is None else json.dumps({"compatibilityLevel": level}).encode()


def mode_record(subject: str | None, mode: str | None) -> Record:
    key = _key({"keytype": "MODE", "subject": subject, "magic": 0})
    return key, None if mode is None else json.dumps({"mode": mode}).encode()


class RegistryState:
    """Subjects, versions, global ids, configs and modes as of ``next_offset`` of the topic."""

    def __init__(self) -> None:
        self.subjects: dict[str, dict[int, Version]] = {}
        self.schemas: dict[int, SchemaText] = {}
        self.ids: dict[tuple[str, str, tuple[Reference, ...]], int] = {}
        self.users: dict[int, set[tuple[str, int]]] = {}  # id -> (subject, version) holding it
        self.max_id = 0
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self.next_offset = 0

    # -- applying records ----------------------------------------------------------------------------

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """Apply the record at ``offset``. One that cannot be read (not JSON, fields of the wrong type or range:
        any bytes a client produced to the topic) is logged and skipped, and changes nothing."""
        self.next_offset = max(self.next_offset, offset + 1)
        try:
            k = json.loads(key) if key else None
            if not isinstance(k, dict):
                return
            keytype = k.get("keytype")
            v = json.loads(value) if value is not None else None
            if v is not None and not isinstance(v, dict):
                raise ValueError(f"the value is a JSON {type(v).__name__}, not an object")
            if keytype == "SCHEMA":
                subject, version = _string(k["subject"]), _integer(k["version"], 1)
                self._apply_schema(subject, version, None if v is None else _version(subject, version, v))
            elif keytype == "CONFIG":
                self._apply_setting(self.configs, k.get("subject"), v, "compatibilityLevel", COMPATIBILITY_LEVELS)
            elif keytype == "MODE":
                self._apply_setting(self.modes, k.get("subject"), v, "mode", MODES)
        except (ValueError, TypeError, KeyError, RecursionError) as e:  # RecursionError: JSON nested too deep
            log.warning("Skipping unreadable _schemas record at offset %d: %s: %s", offset, type(e).__name__, e)

    @staticmethod
    def _apply_setting(
        table: dict[str | None, str], subject: Any, v: dict[str, Any] | None, field: str, allowed: tuple[str, ...]
    ) -> None:
        name = None if subject is None else _string(subject)
        if v is None:
            table.pop(name, None)
            return
        setting = _string(v[field])
        if setting not in allowed:
            raise ValueError(f"{field} {setting!r} is none of {', '.join(allowed)}")
        table[name] = setting

    def _apply_schema(self, subject: str, version: int, new: Version | None) -> None:
        versions = self.subjects.setdefault(subject, {})
        old = versions.pop(version, None)
        if old is not None:
            holders = self.users.get(old.schema_id, set())
            holders.discard((subject, version))
            if not holders:
                self.users.pop(old.schema_id, None)
                gone = self.schemas.pop(old.schema_id, None)
                if gone is not None:
                    self.ids.pop(gone.identity, None)
        if new is None:
            if not versions:
                del self.subjects[subject]
            return
        versions[version] = new
        self.schemas[new.schema_id] = new.schema
        self.ids.setdefault(new.schema.identity, new.schema_id)
        self.users.setdefault(new.schema_id, set()).add((subject, version))
        self.max_id = max(self.max_id, new.schema_id)

    # -- queries -------------------------------------------------------------------------------------

    def versions(self, subject: str, *, deleted: bool = False) -> list[Version]:
        """The subject's versions, oldest first (soft-deleted ones only with ``deleted``)."""
        found = self.subjects.get(subject, {})
        return [found[n] for n in sorted(found) if deleted or not found[n].deleted]

    def subject_names(self, *, deleted: bool = False) -> list[str]:
        return sorted(s for s in self.subjects if self.versions(s, deleted=deleted))

    def id_for(self, schema: SchemaText) -> int | None:
        return self.ids.get(schema.identity)

    def compatibility(self, subject: str | None) -> str:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, DEFAULT_COMPATIBILITY)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, DEFAULT_MODE)

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of live (not soft-deleted) versions whose schema references ``subject`` ``version``."""
        out = set()
        for versions in self.subjects.values():
            for v in versions.values():
                if not v.deleted and any(r.subject == subject and r.version == version for r in v.schema.references):
                    out.add(v.schema_id)
        return sorted(out)


# -- reading values of the topic, which may hold anything -------------------------------------------------

_MAX_INT = 2**31 - 1  # ids and versions are Java ints in Confluent's registry


def _string(x: Any) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{x!r} is not a string")
    return x


def _integer(x: Any, low: int) -> int:
    if not isinstance(x, int) or isinstance(x, bool) or not low <= x <= _MAX_INT:
        raise ValueError(f"{x!r} is not an integer from {low} to {_MAX_INT}")
    return x


def _version(subject: str, version: int, v: dict[str, Any]) -> Version:
    refs = v.get("references") or []
    if not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs):
        raise TypeError("references are not a list of objects")
    references = tuple(Reference(_string(r["name"]), _string(r["subject"]), _integer(r["version"], 1)) for r in refs)
    schema = SchemaText(_string(v.get("schemaType") or AVRO), _string(v["schema"]), references)
    deleted = v.get("deleted", False)
    if not isinstance(deleted, bool):
        raise TypeError(f"deleted {deleted!r} is not a boolean")
    return Version(subject, version, _integer(v["id"], 0), schema, deleted)
