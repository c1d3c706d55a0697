"""The ACL authorizer's rules (Kafka's AclAuthorizer): patterns, wildcards, deny over allow, implied operations,
super users, hosts, allow.everyone.if.no.acl.found, the by-resource-type question; and the binding filters of the
ACL APIs."""

from __future__ import annotations

import pytest

from rill.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCache,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    binding_problem,
)
from rill.security.authorizer import AclAuthorizer, canonical_host, parse_super_users
from rill.security.principal import KafkaPrincipal

ALICE, BOB = KafkaPrincipal("User", "alice"), KafkaPrincipal("User", "bob")
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation


def _authorizer(*acls: tuple[ResourceType, str, PatternType, str, str, AclOperation, PermissionType],
                super_users: str = "", allow_if_none: bool = False) -> AclAuthorizer:  # fmt: skip
    cache = AclCache()
    for b in acls:
        pattern = ResourcePattern(b[0], b[1], b[2])
        cache.set_resource(pattern, {*cache.entries(pattern), AccessControlEntry(b[3], b[4], b[5], b[6])})
    return AclAuthorizer(lambda: cache, parse_super_users(super_users), allow_if_none)


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = _authorizer((TOPIC, "orders", LIT, "User:alice", "*", Op.READ, ALLOW),
                    (TOPIC, "team-", PRE, "User:alice", "*", Op.WRITE, ALLOW),
                    (TOPIC, "*", LIT, "User:bob", "*", Op.READ, ALLOW))  # fmt: skip
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "orders")
    assert not a.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "orders2")  # literal is exact
    assert a.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "team-a")
    assert not a.authorize(ALICE, "10.0.0.1", Op.WRITE, TOPIC, "team")
    assert a.authorize(BOB, "10.0.0.1", Op.READ, TOPIC, "anything")
    assert not a.authorize(BOB, "10.0.0.1", Op.READ, GROUP, "anything")  # no ACL, not allowed by default


def test_deny_wins_and_wildcard_principal() -> None:
    a = _authorizer((TOPIC, "*", LIT, "User:*", "*", Op.ALL, ALLOW),
                    (TOPIC, "secret", PRE, "User:bob", "*", Op.READ, DENY))  # fmt: skip
    assert a.authorize(BOB, "h", Op.READ, TOPIC, "public")
    assert not a.authorize(BOB, "h", Op.READ, TOPIC, "secret-plans")
    assert a.authorize(BOB, "h", Op.WRITE, TOPIC, "secret-plans")  # the deny names READ only
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "secret-plans")
    a = _authorizer((TOPIC, "t", LIT, "User:alice", "*", Op.READ, ALLOW),
                    (TOPIC, "t", LIT, "User:*", "*", Op.ALL, DENY))  # fmt: skip
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")


def test_implied_operations() -> None:
    a = _authorizer((TOPIC, "t", LIT, "User:alice", "*", Op.WRITE, ALLOW),
                    (TOPIC, "c", LIT, "User:alice", "*", Op.ALTER_CONFIGS, ALLOW))  # fmt: skip
    assert a.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t")  # WRITE implies DESCRIBE
    assert not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")
    assert a.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, TOPIC, "c")
    assert not a.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "c")  # ALTER_CONFIGS does not imply DESCRIBE
    # a DENY of READ does not deny DESCRIBE, though an ALLOW of READ would allow it
    a = _authorizer((TOPIC, "t", LIT, "User:alice", "*", Op.ALL, ALLOW),
                    (TOPIC, "t", LIT, "User:alice", "*", Op.READ, DENY))  # fmt: skip
    assert a.authorize(ALICE, "h", Op.DESCRIBE, TOPIC, "t") and not a.authorize(ALICE, "h", Op.READ, TOPIC, "t")


def test_hosts() -> None:
    a = _authorizer((TOPIC, "t", LIT, "User:alice", "10.0.0.1", Op.READ, ALLOW),
                    (TOPIC, "t", LIT, "User:alice", "10.0.0.9", Op.READ, DENY))  # fmt: skip
    assert a.authorize(ALICE, "10.0.0.1", Op.READ, TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.2", Op.READ, TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.9", Op.READ, TOPIC, "t")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    a = _authorizer((TOPIC, "t", LIT, "User:alice", "*", Op.READ, DENY), super_users=" User:alice ; User:bob")
    assert a.authorize(ALICE, "h", Op.READ, TOPIC, "t") and a.authorize(BOB, "h", Op.ALTER, CLUSTER, "kafka-cluster")
    a = _authorizer((TOPIC, "t", LIT, "User:bob", "*", Op.READ, ALLOW), allow_if_none=True)
    assert a.authorize(ALICE, "h", Op.WRITE, TOPIC, "other")  # no ACL on it
    assert not a.authorize(ALICE, "h", Op.WRITE, TOPIC, "t")  # an ACL exists, for someone else


def test_authorize_any() -> None:
    a = _authorizer((TOPIC, "team-", PRE, "User:alice", "*", Op.WRITE, ALLOW),
                    (TOPIC, "orders", LIT, "User:bob", "*", Op.WRITE, ALLOW),
                    (TOPIC, "or", PRE, "User:bob", "*", Op.WRITE, DENY))  # fmt: skip
    assert a.authorize_any(ALICE, "h", Op.WRITE, TOPIC)
    assert not a.authorize_any(BOB, "h", Op.WRITE, TOPIC)  # its only allow is covered by a deny
    assert not a.authorize_any(ALICE, "h", Op.READ, TOPIC)


def test_binding_problems_and_filters() -> None:
    def binding(rtype: ResourceType, name: str, pattern: PatternType, op: AclOperation = Op.READ,
                principal: str = "User:alice") -> AclBinding:  # fmt: skip
        return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, "*", op, ALLOW))

    assert binding_problem(binding(TOPIC, "t", LIT)) is None
    assert binding_problem(binding(CLUSTER, "kafka-cluster", LIT, Op.ALTER)) is None
    assert binding_problem(binding(CLUSTER, "other", LIT, Op.ALTER)) is not None
    assert binding_problem(binding(GROUP, "g", LIT, Op.WRITE)) is not None  # WRITE does not apply to groups
    assert binding_problem(binding(TOPIC, "t", PatternType.MATCH)) is not None
    assert binding_problem(binding(TOPIC, "t", LIT, principal="alice")) is not None
    assert binding_problem(binding(ResourceType.DELEGATION_TOKEN, "t", LIT)) is not None
    bindings = [binding(TOPIC, "team-a", LIT), binding(TOPIC, "team-", PRE), binding(TOPIC, "*", LIT),
                binding(TOPIC, "other", LIT), binding(GROUP, "team-a", LIT)]  # fmt: skip

    def names(flt: AclBindingFilter) -> list[tuple[str, str]]:
        return [(b.pattern.resource_type.name, b.pattern.name) for b in bindings if flt.matches(b)]

    def flt(rtype: ResourceType, name: str | None, pattern: PatternType) -> AclBindingFilter:
        return AclBindingFilter(rtype, name, pattern, None, None, Op.ANY, PermissionType.ANY)

    assert names(flt(TOPIC, "team-a", PatternType.MATCH)) == [("TOPIC", "team-a"), ("TOPIC", "team-"), ("TOPIC", "*")]
    assert names(flt(ResourceType.ANY, "team-a", PatternType.ANY)) == [("TOPIC", "team-a"), ("GROUP", "team-a")]
    assert names(flt(TOPIC, None, PRE)) == [("TOPIC", "team-")]
    assert flt(ResourceType.UNKNOWN, None, PatternType.ANY).problem() is not None


@pytest.mark.parametrize("value", ["User:a;User:b", "", " ; User:x"])
def test_super_users_parse(value: str) -> None:
    assert all(":" in p for p in parse_super_users(value))


def test_hosts_are_compared_as_addresses() -> None:
    """ACL hosts as Kafka's Java tools write them (``InetAddress.getHostAddress``) match the client's address
    however it is spelled; an IPv4 client of a dual-stack listener is its IPv4 address."""
    a = _authorizer((TOPIC, "t", LIT, "User:alice", "0:0:0:0:0:0:0:1", Op.READ, ALLOW),
                    (TOPIC, "t", LIT, "User:alice", "10.0.0.7", Op.READ, ALLOW),
                    (TOPIC, "t", LIT, "User:bob", "*", Op.READ, ALLOW),
                    (TOPIC, "t", LIT, "User:bob", "fe80:0:0:0:0:0:0:1", Op.READ, DENY))  # fmt: skip
    for host in ("::1", "0:0:0:0:0:0:0:1", "[::1]", "10.0.0.7", "::ffff:10.0.0.7"):
        assert a.authorize(ALICE, host, Op.READ, TOPIC, "t"), host
    assert not a.authorize(ALICE, "::2", Op.READ, TOPIC, "t")
    assert not a.authorize(BOB, "fe80::1", Op.READ, TOPIC, "t")
    assert a.authorize(BOB, "fe80::2", Op.READ, TOPIC, "t")
    assert canonical_host("0:0:0:0:0:0:0:1") == "::1" and canonical_host("broker-1") == "broker-1"
    assert a.authorize_any(ALICE, "::1", Op.READ, TOPIC) and not a.authorize_any(ALICE, "::2", Op.READ, TOPIC)
