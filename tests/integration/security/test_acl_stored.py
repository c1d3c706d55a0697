"""Stored ACLs fail closed: an entry of a resource that cannot be read (written by another tool or version, or
damaged) never takes the resource's other entries with it, and never allows more than it would have."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.security.test_acl_disclosure import ALL, ALLOW, DENY, READ, TOPIC, _configs, acl
from tests.integration.security.test_acl_walk import sasl_wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)

UNREADABLE = [
    {"principal": "User:carol", "permissionType": "Deny", "operation": "Frobnicate", "host": "*"},
    {"principal": "User:dave", "permissionType": "Allow", "operation": "Frobnicate", "host": "*"},
]


def _damage(data_dir: Path, resource: str) -> int:
    """Add the UNREADABLE entries to every stored form of ``resource``'s ACLs (snapshot and journal): how many."""
    damaged = 0

    def visit(resources: list[dict[str, Any]]) -> None:
        nonlocal damaged
        for r in resources:
            if r.get("name") == resource:
                r["acls"] = [*r["acls"], *UNREADABLE]
                damaged += 1

    for snapshot in data_dir.rglob("rill-metadata.json"):
        state = json.loads(snapshot.read_text())
        visit(state.get("acls", []))
        snapshot.write_text(json.dumps(state))
    for journal in data_dir.rglob("rill-metadata.log"):
        lines = []
        for line in journal.read_text().splitlines():
            change = json.loads(line)
            if change.get("type") == "acls":
                visit(change["resources"])
            lines.append(json.dumps(change))
        journal.write_text("".join(f"{line}\n" for line in lines))
    return damaged


def _fetch_error(address: str, user: str) -> int:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "topics": [{"topic": "secret", "partitions": [
        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]}]}  # fmt: skip
    got = sasl_wire(address, user, f"{user}-secret").call(ApiKey.FETCH, 12, body)
    return int(got["responses"][0]["partitions"][0]["error_code"])


def test_an_unreadable_stored_acl_entry_denies_and_keeps_the_others(tmp_path: Path) -> None:
    with rill.testing.broker(_configs(), data_dir=tmp_path / "b") as b:
        bootstrap = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("secret", 1, 1)])["secret"].result(timeout=15)
        acl(bootstrap, TOPIC, "*", "User:*", ALL)  # everyone may do everything with every topic...
        acl(bootstrap, TOPIC, "secret", "User:alice", READ, DENY)  # ...but alice may not read this one
        acl(bootstrap, TOPIC, "secret", "User:bob", READ, ALLOW)
        b.stop()
        assert _damage(tmp_path / "b", "secret") >= 1
        b.start()
        address = b.listener_address("SASL_PLAINTEXT")
        errors = {user: _fetch_error(address, user) for user in ("alice", "bob", "carol", "dave")}
        described = b.broker.services.metadata.acls().matching(2, "secret")
    assert errors == {
        "alice": ErrorCode.TOPIC_AUTHORIZATION_FAILED,  # her DENY is kept beside the unreadable entries
        "bob": 0,
        "carol": ErrorCode.TOPIC_AUTHORIZATION_FAILED,  # a DENY whose operation cannot be read denies all
        "dave": 0,  # an ALLOW that cannot be read allows no one; the wildcard still allows him
    }, described
