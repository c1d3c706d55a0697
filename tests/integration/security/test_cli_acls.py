"""``rill acls`` adds, lists and removes ACLs with kafka-acls's options, over a SASL listener as a super user
(``--command-config``); what it adds is what the broker enforces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.security.test_acl_walk import sasl_wire
from tests.integration.security.test_acls import _broker_configs

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)


def _rill(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rill", *args], capture_output=True, text=True, timeout=60)


def _describe_code(b: rill.testing.TestBroker, user: str, topic: str) -> int:
    w = sasl_wire(b.listener_address("SASL_PLAINTEXT"), user, f"{user}-secret")
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    return int(w.call(ApiKey.METADATA, 12, body)["topics"][0]["error_code"])


def test_add_list_remove(tmp_path: Path) -> None:
    with rill.testing.broker(_broker_configs(**{"super.users": "User:admin"})) as b:
        props = tmp_path / "admin.properties"
        props.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="admin" password="admin-secret";\n'
        )
        conn = ["--bootstrap-server", b.listener_address("SASL_PLAINTEXT"), "--command-config", str(props)]
        anonymous = _rill("acls", "--list", "--bootstrap-server", b.bootstrap_servers)  # PLAINTEXT: no super user
        assert anonymous.returncode == 0 and anonymous.stdout == ""  # librdkafka reports no error; nothing shown

        added = _rill("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read", "--operation",
                      "Describe", "--topic", "orders", *conn)  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert added.stdout.count("Added ACL") == 2
        team = _rill("acls", "--add", "--allow-principal", "User:bob", "--producer", "--topic", "team-a.",
                     "--resource-pattern-type", "prefixed", *conn)  # fmt: skip
        assert team.returncode == 0 and team.stdout.count("Added ACL") == 3, team.stderr
        assert _describe_code(b, "alice", "orders") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # may see: not there
        assert _describe_code(b, "bob", "orders") == ErrorCode.TOPIC_AUTHORIZATION_FAILED

        listed = _rill("acls", "--list", "--topic", "orders", *conn)
        assert listed.returncode == 0, listed.stderr
        assert "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)" in listed.stdout
        assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed.stdout
        everything = json.loads(_rill("acls", "--list", "--json", *conn).stdout)
        assert sorted((r["name"], r["pattern_type"], len(r["acls"])) for r in everything) == [
            ("orders", "LITERAL", 2), ("team-a.", "PREFIXED", 3)]  # fmt: skip
        matching = json.loads(_rill("acls", "--list", "--topic", "team-a.events", "--resource-pattern-type",
                                    "match", "--json", *conn).stdout)  # fmt: skip
        assert [r["name"] for r in matching] == ["team-a."]

        bad = _rill("acls", "--add", "--allow-principal", "alice", "--topic", "x", *conn)
        assert bad.returncode == 2 and "Type:name" in bad.stderr
        bad_op = _rill("acls", "--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "x", *conn)
        assert bad_op.returncode == 2 and "unknown operation" in bad_op.stderr

        removed = _rill("acls", "--remove", "--force", "--topic", "orders", *conn)
        assert removed.returncode == 0, removed.stderr
        assert removed.stdout.count("Removed ACL") == 2
        assert _describe_code(b, "alice", "orders") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        left = json.loads(_rill("acls", "--list", "--json", *conn).stdout)
        assert [r["name"] for r in left] == ["team-a."]
