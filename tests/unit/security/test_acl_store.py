"""ACLs in the embedded metadata store: kept through the journal and through a snapshot, removed for good, and a
stored entry that no longer parses set aside at load (never a failed start)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.journal import JOURNAL_FILE, SNAPSHOT_FILE
from rill.metadata.store import BrokerInfo
from rill.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
)

ORDERS = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
TEAM = ResourcePattern(ResourceType.GROUP, "team-", PatternType.PREFIXED)
READ = AccessControlEntry("User:alice", "*", AclOperation.READ, PermissionType.ALLOW)
DENY = AccessControlEntry("User:bob", "10.0.0.1", AclOperation.ALL, PermissionType.DENY)


def _store(path: Path) -> EmbeddedMetadataStore:
    return EmbeddedMetadataStore(path, 1, BrokerInfo(1, "127.0.0.1", 9092))


def test_acls_survive_the_journal_and_the_snapshot(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = _store(tmp_path)
        s._journal._compact_after = 3
        await s.alter_acls(s.acls().changed([AclBinding(ORDERS, READ), AclBinding(ORDERS, DENY)], []))
        for i in range(5):
            await s.create_topic(f"t{i}", 1, 1, {})
        await s.alter_acls(s.acls().changed([AclBinding(TEAM, READ)], [AclBinding(ORDERS, DENY)]))
        await s.close()

    asyncio.run(scenario())
    snapshot = json.loads((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert "orders" in [r["name"] for r in snapshot["acls"]]  # the snapshot holds the ACLs
    reopened = _store(tmp_path)
    assert reopened.acls().entries(ORDERS) == {READ}
    assert reopened.acls().entries(TEAM) == {READ}
    assert sorted(p.name for p in reopened.acls().patterns()) == ["orders", "team-"]


def test_a_stored_acl_that_does_not_parse_is_set_aside(tmp_path: Path) -> None:
    asyncio.run(_store(tmp_path).close())
    good = {"resourceType": "Topic", "name": "ok", "patternType": "LITERAL",
            "acls": [{"principal": "User:a", "permissionType": "Allow", "operation": "Read", "host": "*"}]}  # fmt: skip
    bad = {"resourceType": "Spaceship", "name": "x", "patternType": "LITERAL", "acls": []}
    worse = {"resourceType": "Topic", "name": "y", "patternType": "LITERAL",
             "acls": [{"principal": "User:a", "permissionType": "Maybe", "operation": "Read"}]}  # fmt: skip
    with (tmp_path / JOURNAL_FILE).open("a") as f:
        f.write(json.dumps({"type": "acls", "offset": 1, "resources": [bad, worse, good]}) + "\n")
    reopened = _store(tmp_path)
    assert [p.name for p in reopened.acls().patterns()] == ["ok"]
