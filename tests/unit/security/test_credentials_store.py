"""SCRAM credentials in the embedded metadata store: kept through the journal and through a snapshot, deleted
for good, and a stored value that no longer parses set aside at load (never a failed start)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.journal import JOURNAL_FILE, SNAPSHOT_FILE
from rill.metadata.store import BrokerInfo
from rill.security.scram import credential_from_password


def _store(path: Path) -> EmbeddedMetadataStore:
    return EmbeddedMetadataStore(path, 1, BrokerInfo(1, "127.0.0.1", 9092))


def test_credentials_survive_the_journal_and_the_snapshot(tmp_path: Path) -> None:
    alice = credential_from_password("SCRAM-SHA-256", "a")
    bob = credential_from_password("SCRAM-SHA-512", "b", 8192)

    async def scenario() -> None:
        s = _store(tmp_path)
        s._journal._compact_after = 3
        await s.alter_scram_credentials({"alice": {"SCRAM-SHA-256": alice}, "bob": {"SCRAM-SHA-512": bob}})
        for i in range(5):
            await s.create_topic(f"t{i}", 1, 1, {})
        await s.alter_scram_credentials({"bob": {"SCRAM-SHA-512": None}, "carol": {"SCRAM-SHA-256": alice}})
        await s.close()

    asyncio.run(scenario())
    snapshot = json.loads((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert "alice" in snapshot["scram_credentials"]
    reopened = _store(tmp_path)
    assert reopened.scram_users() == ["alice", "carol"]
    assert reopened.scram_credential("alice", "SCRAM-SHA-256") == alice
    assert reopened.scram_credentials("bob") == {}


def test_a_stored_credential_that_does_not_parse_is_set_aside(tmp_path: Path) -> None:
    asyncio.run(_store(tmp_path).close())
    with (tmp_path / JOURNAL_FILE).open("a") as f:
        f.write(json.dumps({"type": "user_scram", "offset": 1, "users": {"eve": {"SCRAM-SHA-256": "salt=??"}}}) + "\n")
    reopened = _store(tmp_path)
    assert reopened.scram_users() == []
