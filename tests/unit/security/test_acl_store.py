"""ACLs in the embedded metadata store and in ZooKeeper's znodes: kept through the journal and through a snapshot,
removed for good, and stored bytes that do not parse read fail-closed at load (never a failed start, never an
ACL lost that denied)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.journal import JOURNAL_FILE, SNAPSHOT_FILE
from rill.metadata.store import BrokerInfo
from rill.metadata.zk_acls import decode_acls
from rill.security.acl import (
    DENY_EVERYONE,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    entries_from_json,
    unreadable_allow,
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
    assert sorted(p.name for p in reopened.acls().patterns()) == ["ok", "y"]  # an unknown resource type: skipped
    # an entry that may be a DENY and names no host denies everyone, rather than vanishing
    assert reopened.acls().entries(ResourcePattern(ResourceType.TOPIC, "y", PatternType.LITERAL)) == {DENY_EVERYONE}


def test_unreadable_entries_deny_more_never_less() -> None:
    read = {"principal": "User:a", "permissionType": "Allow", "operation": "Read", "host": "*"}
    deny = {"principal": "User:b", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}
    entries = entries_from_json([
        read, deny,
        {"principal": "User:c", "permissionType": "Deny", "operation": "Frobnicate", "host": "10.0.0.2"},
        {"principal": "User:d", "permissionType": "Allow", "operation": "Frobnicate", "host": "*"},
        {"principal": "User:e", "permissionType": "Perhaps", "operation": "Read", "host": "*"},
        {"permissionType": "Deny", "operation": "Read"},
        "not an entry",
    ], "test")  # fmt: skip
    assert entries == [
        AccessControlEntry.from_json(read),
        AccessControlEntry.from_json(deny),
        AccessControlEntry("User:c", "10.0.0.2", AclOperation.ALL, PermissionType.DENY),
        unreadable_allow("User:d"),
        AccessControlEntry("User:e", "*", AclOperation.ALL, PermissionType.DENY),
        DENY_EVERYONE,
        DENY_EVERYONE,
    ]
    assert entries_from_json({"acls": "?"}, "test") == [DENY_EVERYONE]


def test_a_znode_that_is_not_kafkas_json_denies_everything_on_its_resource() -> None:
    good = {"version": 1, "acls": [{"principal": "User:a", "permissionType": "Deny", "operation": "Read",
                                    "host": "*"}]}  # fmt: skip
    assert decode_acls(json.dumps(good).encode()) == [
        AccessControlEntry("User:a", "*", AclOperation.READ, PermissionType.DENY)
    ]
    for data in (b"\xff\xfe", b"{not json", b"[1, 2]", b'{"version": 1, "acls": {"a": 1}}'):
        assert decode_acls(data) == [DENY_EVERYONE], data


def test_a_resource_whose_only_allow_cannot_be_read_still_has_acls() -> None:
    """With ``allow.everyone.if.no.acl.found``, a resource without ACLs is open to all; one whose only entry is an
    ALLOW that cannot be read has an ACL (for someone): it must stay closed to everyone else, and the unreadable
    ALLOW allows no one."""
    from rill.security.acl import AclCache
    from rill.security.authorizer import AclAuthorizer
    from rill.security.principal import KafkaPrincipal

    cache = AclCache()
    unreadable = {"principal": "User:alice", "permissionType": "Allow", "operation": "Frobnicate", "host": "*"}
    cache.set_resource(ORDERS, entries_from_json([unreadable], "test"))
    authorizer = AclAuthorizer(lambda: cache, [], allow_if_no_acl=True)
    for user in ("alice", "mallory"):
        principal = KafkaPrincipal("User", user)
        assert not authorizer.authorize(principal, "10.0.0.9", AclOperation.READ, ResourceType.TOPIC, "orders")
        assert not authorizer.authorize(principal, "10.0.0.9", AclOperation.WRITE, ResourceType.TOPIC, "orders")
    assert authorizer.authorize(KafkaPrincipal("User", "mallory"), "10.0.0.9", AclOperation.READ,
                                ResourceType.TOPIC, "other")  # fmt: skip
    assert decode_acls(json.dumps({"version": 1, "acls": [unreadable]}).encode()) != []
