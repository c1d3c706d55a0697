"""ACLs in ZooKeeper, as Kafka 2.x keeps them.

Literal patterns live at ``/kafka-acl/<ResourceType>/<name>``, prefixed ones at
``/kafka-acl-extended/prefixed/<ResourceType>/<name>`` (ResourceType as ``Topic``, ``Group``, ``Cluster``,
``TransactionalId``), each holding ``{"version": 1, "acls": [{"principal": "User:alice", "permissionType":
"Allow", "operation": "Read", "host": "*"}, ...]}``. A change is announced by a sequential
``/kafka-acl-changes/acl_changes_`` znode holding ``Topic:orders`` (literal), or
``/kafka-acl-extended-changes/acl_changes_`` holding ``{"version": 1, "resourceType": "Topic", "name": "team-",
"patternType": "PREFIXED"}``. A resource with no ACL left has no znode.

Every broker follows the resources with watches (each type's children, then each resource's data), so an ACL
written through any broker is in effect on all of them at once; a write returns once this broker's cache shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.errors import ErrorCode, KafkaError
from rill.metadata.zk_tx import after_lost_race, committed
from rill.metadata.zk_watches import lasting_children_watch
from rill.security.acl import (
    STORED_TYPES,
    AccessControlEntry,
    AclCache,
    PatternType,
    ResourcePattern,
    ResourceType,
    entries_from_json,
    type_name,
)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
NOTICE_EXPIRY_S = 15 * 60
log = logging.getLogger(__name__)


def type_dir(resource_type: ResourceType, pattern_type: PatternType) -> str:
    root = LITERAL_ROOT if pattern_type == PatternType.LITERAL else PREFIXED_ROOT
    return f"{root}/{type_name(resource_type)}"


def resource_path(pattern: ResourcePattern) -> str:
    return f"{type_dir(pattern.resource_type, pattern.pattern_type)}/{pattern.name}"


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = sorted((e.to_json() for e in entries), key=lambda d: sorted(d.items()))
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes, where: str = "") -> list[AccessControlEntry]:
    """A resource znode's entries, read fail-closed (``entries_from_json``): a payload that is not Kafka's JSON
    denies every operation on the resource, rather than leaving it without ACLs."""
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        payload = None
    raw = payload.get("acls", []) if isinstance(payload, dict) else None
    return entries_from_json(raw, where or "a resource")


class ZkAcls:
    def __init__(self, zk: KazooClient, on_loop: Callable[[Callable[[], None]], None]) -> None:
        self._zk = zk
        self._on_loop = on_loop  # runs a function on the event loop (watch callbacks come on kazoo threads)
        self.cache = AclCache()
        self._watched: set[ResourcePattern] = set()

    def start(self) -> None:
        """Make the parents and watch every resource type's ACLs (blocking: run in a thread)."""
        self._zk.ensure_path(LITERAL_CHANGES)
        self._zk.ensure_path(EXTENDED_CHANGES)
        for resource_type in STORED_TYPES:
            for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
                path = type_dir(resource_type, pattern_type)
                self._zk.ensure_path(path)
                lasting_children_watch(self._zk, path, self._children_watcher(resource_type, pattern_type))

    def _children_watcher(self, resource_type: ResourceType, pattern_type: PatternType) -> Callable[[list[str]], bool]:
        def on_children(names: list[str]) -> bool:
            for name in names:
                pattern = ResourcePattern(resource_type, name, pattern_type)
                if pattern not in self._watched:
                    self._watched.add(pattern)
                    self._zk.DataWatch(resource_path(pattern), self._data_watcher(pattern))
            return True

        return on_children

    def _data_watcher(self, pattern: ResourcePattern) -> Callable[..., bool]:
        def on_data(data: bytes | None, *_: Any) -> bool:
            entries = decode_acls(data, f"{pattern} ({resource_path(pattern)})") if data else []
            self._on_loop(lambda: self.cache.set_resource(pattern, entries))
            if data is None:
                self._watched.discard(pattern)
                return False
            return True

        return on_data

    async def alter(self, changes: Mapping[ResourcePattern, Iterable[AccessControlEntry]], timeout_s: float) -> None:
        wanted = {p: frozenset(entries) for p, entries in changes.items()}

        def write() -> None:
            # Every pattern's entries and the change notices in one transaction, each write conditional on what was
            # read (read again when another broker was first): the change is made whole or not at all.
            for attempt in itertools.count(1):
                tx = self._zk.transaction()
                for pattern, entries in wanted.items():
                    path = resource_path(pattern)
                    stat = self._zk.exists(path)
                    if entries and stat is None:
                        tx.create(path, encode_acls(entries))
                    elif entries:
                        tx.set_data(path, encode_acls(entries), version=stat.version)
                    elif stat is not None:
                        tx.delete(path, version=stat.version)
                    self._announce(tx, pattern)
                if committed(tx.commit()):
                    break
                parents = {resource_path(p).rsplit("/", 1)[0] for p in wanted}
                after_lost_race(self._zk, attempt, [*parents, LITERAL_CHANGES, EXTENDED_CHANGES])
            self._purge_old_notices()

        await asyncio.to_thread(write)
        deadline = time.monotonic() + timeout_s
        while any(self.cache.entries(p) != entries for p, entries in wanted.items()):
            if time.monotonic() > deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the ACLs were written, but are not yet in effect")
            await asyncio.sleep(0.02)

    def _announce(self, tx: Any, pattern: ResourcePattern) -> None:
        if pattern.pattern_type == PatternType.LITERAL:
            parent, notice = LITERAL_CHANGES, f"{type_name(pattern.resource_type)}:{pattern.name}".encode()
        else:
            parent = EXTENDED_CHANGES
            notice = json.dumps({"version": 1, "resourceType": type_name(pattern.resource_type),
                                 "name": pattern.name, "patternType": pattern.pattern_type.name}).encode()  # fmt: skip
        tx.create(f"{parent}/{CHANGE_PREFIX}", notice, sequence=True)

    def _purge_old_notices(self) -> None:
        """Delete change notices older than Kafka's 15 minutes (every broker has followed them by then)."""
        cutoff_ms = (time.time() - NOTICE_EXPIRY_S) * 1000
        for parent in (LITERAL_CHANGES, EXTENDED_CHANGES):
            for child in self._zk.get_children(parent):
                path = f"{parent}/{child}"
                stat = self._zk.exists(path)
                if stat is not None and stat.ctime < cutoff_ms:
                    with contextlib.suppress(NoNodeError):
                        self._zk.delete(path)
