"""Kafka's ACLs: resource patterns, access control entries, bindings and binding filters.

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED) with an entry (principal, host,
operation, ALLOW or DENY). The enum codes are Kafka's wire codes. ACLs are stored per resource pattern, as
Kafka's ZooKeeper layout does, and an :class:`AclCache` keeps them for the authorizer and the ACL APIs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

log = logging.getLogger(__name__)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

# Kafka's names as ZooKeeper stores them (ResourceType.toString / AclOperation / AclPermissionType, camel case).
_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
_OPERATION_NAMES = {
    AclOperation.ALL: "All",
    AclOperation.READ: "Read",
    AclOperation.WRITE: "Write",
    AclOperation.CREATE: "Create",
    AclOperation.DELETE: "Delete",
    AclOperation.ALTER: "Alter",
    AclOperation.DESCRIBE: "Describe",
    AclOperation.CLUSTER_ACTION: "ClusterAction",
    AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    AclOperation.ALTER_CONFIGS: "AlterConfigs",
    AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
    AclOperation.CREATE_TOKENS: "CreateTokens",
    AclOperation.DESCRIBE_TOKENS: "DescribeTokens",
}
_PERMISSION_NAMES = {PermissionType.ALLOW: "Allow", PermissionType.DENY: "Deny"}

STORED_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID)
"""The resource types Rill keeps ACLs for (delegation tokens and users are refused as unsupported)."""

SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
}  # fmt: skip
"""Kafka's ``AclEntry.supportedOperations`` (ALL is accepted for every type besides)."""


def type_name(t: ResourceType) -> str:
    return _TYPE_NAMES[t]


def type_from_name(name: str) -> ResourceType:
    for t, n in _TYPE_NAMES.items():
        if n.lower() == name.lower():
            return t
    raise ValueError(f"unknown resource type {name!r}")


def operation_name(op: AclOperation) -> str:
    return _OPERATION_NAMES[op]


def operation_from_name(name: str) -> AclOperation:
    wanted = name.replace("_", "").replace("-", "").lower()
    for op, n in _OPERATION_NAMES.items():
        if n.lower() == wanted:
            return op
    raise ValueError(f"unknown operation {name!r}")


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"  # fmt: skip


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def to_json(self) -> dict[str, str]:
        """Kafka's stored form of one entry in a resource's znode."""
        return {"principal": self.principal, "permissionType": _PERMISSION_NAMES[self.permission],
                "operation": _OPERATION_NAMES[self.operation], "host": self.host}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AccessControlEntry:
        permission = next(p for p, n in _PERMISSION_NAMES.items() if n == data["permissionType"])
        operation = next(o for o, n in _OPERATION_NAMES.items() if n == data["operation"])
        return cls(str(data["principal"]), str(data["host"]), operation, permission)


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def binding_problem(binding: AclBinding) -> str | None:
    """Why Kafka would refuse to create ``binding`` (INVALID_REQUEST), or None."""
    p, e = binding.pattern, binding.entry
    if p.resource_type not in STORED_TYPES:
        return f"resource type {p.resource_type.name} is not supported"
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {p.pattern_type.name} cannot be stored (LITERAL or PREFIXED)"
    if not p.name:
        return "the resource name is empty"
    if p.resource_type == ResourceType.CLUSTER and (p.name != CLUSTER_NAME or p.pattern_type != PatternType.LITERAL):
        return f"a cluster ACL names the literal resource {CLUSTER_NAME!r}"
    if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD:
        return "a prefixed pattern cannot be the wildcard '*'"
    if e.permission not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"permission type {e.permission.name} is not ALLOW or DENY"
    if e.operation != AclOperation.ALL and e.operation not in SUPPORTED_OPERATIONS[p.resource_type]:
        return f"operation {e.operation.name} does not apply to resource type {p.resource_type.name}"
    kind, sep, name = e.principal.partition(":")
    if not sep or not kind or not name:
        return f"principal {e.principal!r} is not Type:name"
    if not e.host:
        return "the host is empty"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter over bindings: None and the ANY codes match everything; MATCH matches the patterns that would
    apply to a literal name (that literal, the wildcard, and every prefix of it)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: PermissionType

    def problem(self) -> str | None:
        """Why this filter is invalid (INVALID_REQUEST), or None."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "the filter has an UNKNOWN resource or pattern type"
        if self.operation == AclOperation.UNKNOWN or self.permission == PermissionType.UNKNOWN:
            return "the filter has an UNKNOWN operation or permission type"
        return None

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            return self.pattern_type == p.pattern_type and (self.name is None or self.name == p.name)
        if self.pattern_type == PatternType.ANY or self.name is None:
            return self.name is None or self.name == p.name
        # MATCH: the patterns that apply to the literal resource self.name
        if p.pattern_type == PatternType.LITERAL:
            return p.name in (self.name, WILDCARD)
        return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)

    def matches_entry(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and (self.operation == AclOperation.ANY or self.operation == e.operation)
            and (self.permission == PermissionType.ANY or self.permission == e.permission)
        )

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)


class AclCache:
    """Every ACL, by resource pattern. Read by the authorizer; changed only through the metadata store."""

    def __init__(self) -> None:
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}

    def set_resource(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        entries = frozenset(entries)
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        return list(self._acls)

    def bindings(self) -> Iterator[AclBinding]:
        for pattern, entries in list(self._acls.items()):
            for entry in entries:
                yield AclBinding(pattern, entry)

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries of every pattern that applies to the literal resource ``name``: its literal pattern, the
        wildcard, and every prefixed pattern it starts with."""
        out: list[AccessControlEntry] = []
        for pattern in (ResourcePattern(resource_type, name, PatternType.LITERAL),
                        ResourcePattern(resource_type, WILDCARD, PatternType.LITERAL)):  # fmt: skip
            out.extend(self._acls.get(pattern, ()))
        for pattern, entries in list(self._acls.items()):
            if (
                pattern.pattern_type == PatternType.PREFIXED
                and pattern.resource_type == resource_type
                and name.startswith(pattern.name)
            ):
                out.extend(entries)
        return out

    def changed(
        self, added: Iterable[AclBinding], removed: Iterable[AclBinding]
    ) -> dict[ResourcePattern, set[AccessControlEntry]]:
        """The new entry sets of the patterns ``added`` and ``removed`` touch (not applied)."""
        out: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in removed:
            out.setdefault(b.pattern, set(self.entries(b.pattern))).discard(b.entry)
        for b in added:
            out.setdefault(b.pattern, set(self.entries(b.pattern))).add(b.entry)
        return out

    def to_json(self) -> list[dict[str, Any]]:
        return [pattern_to_json(p, entries) for p, entries in sorted(self._acls.items(), key=lambda kv: _key(kv[0]))]

    @classmethod
    def from_json(cls, data: Iterable[Mapping[str, Any]]) -> AclCache:
        out = cls()
        out.load(data)
        return out

    def load(self, data: Iterable[Mapping[str, Any]]) -> None:
        """Set the resources of stored items; an item that does not parse is set aside (logged), never fatal."""
        for item in data:
            try:
                pattern, entries = pattern_from_json(item)
            except (KeyError, ValueError, TypeError, StopIteration) as e:
                log.warning("stored ACLs set aside: %r does not parse (%r)", item, e)
                continue
            self.set_resource(pattern, entries)


def _key(p: ResourcePattern) -> tuple[int, int, str]:
    return (int(p.resource_type), int(p.pattern_type), p.name)


def pattern_to_json(pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> dict[str, Any]:
    acls = sorted((e.to_json() for e in entries), key=lambda d: sorted(d.items()))
    return {"resourceType": type_name(pattern.resource_type), "name": pattern.name,
            "patternType": pattern.pattern_type.name, "acls": acls}  # fmt: skip


def pattern_from_json(item: Mapping[str, Any]) -> tuple[ResourcePattern, list[AccessControlEntry]]:
    """A stored resource and its entries (an unreadable entry read as :func:`entries_from_json` does); raises
    when the resource itself does not parse."""
    pattern = ResourcePattern(
        type_from_name(str(item["resourceType"])), str(item["name"]), PatternType[str(item["patternType"])]
    )
    return pattern, entries_from_json(item.get("acls", []), str(pattern))


DENY_EVERYONE = AccessControlEntry(WILDCARD_PRINCIPAL, WILDCARD, AclOperation.ALL, PermissionType.DENY)
"""What a resource whose stored entries cannot be read at all holds: every operation denied to all but super
users, until an operator writes its ACLs again."""


UNREADABLE_PRINCIPAL_TYPE = "Unreadable"
"""The principal type of what an ALLOW that cannot be read becomes: no client authenticates as it."""


def unreadable_allow(principal: Any) -> AccessControlEntry:
    """What an ALLOW that cannot be read is read as: an ALLOW for a principal no client can be, so it allows no one
    but keeps its resource one with ACLs (left out, a resource whose only ACL it was would have none, and
    ``allow.everyone.if.no.acl.found`` would open it to everyone)."""
    name = principal if isinstance(principal, str) and principal else "?"
    return AccessControlEntry(f"{UNREADABLE_PRINCIPAL_TYPE}:{name}", WILDCARD, AclOperation.ALL, PermissionType.ALLOW)


def entries_from_json(raw: Any, where: str) -> list[AccessControlEntry]:
    """Stored entries, read so that bytes this broker did not write can only deny more, never allow more (fail
    closed): an unreadable ALLOW allows no one but still counts as an ACL of its resource (``unreadable_allow``);
    an unreadable entry that is or may be a DENY denies every
    operation to its principal from its host (to everyone, from everywhere, where those cannot be read); a
    list that is not one denies everything. Each is logged."""
    if not isinstance(raw, list):
        log.error("ACLs of %s cannot be read (%r): every operation on it is denied", where, raw)
        return [DENY_EVERYONE]
    out: list[AccessControlEntry] = []
    for item in raw:
        try:
            out.append(AccessControlEntry.from_json(item))
            continue
        except (KeyError, ValueError, TypeError, StopIteration, AttributeError):
            pass
        fields = item if isinstance(item, Mapping) else {}
        if fields.get("permissionType") == _PERMISSION_NAMES[PermissionType.ALLOW]:
            entry = unreadable_allow(fields.get("principal"))
            log.error("ACLs of %s: an ALLOW that cannot be read (%r) is read as %s", where, item, entry)
            out.append(entry)
            continue
        principal, host = fields.get("principal"), fields.get("host")
        entry = DENY_EVERYONE
        if isinstance(principal, str) and ":" in principal and isinstance(host, str) and host:
            entry = AccessControlEntry(principal, host, AclOperation.ALL, PermissionType.DENY)
        log.error("ACLs of %s: an entry that cannot be read (%r) is read as %s", where, item, entry)
        out.append(entry)
    return out
