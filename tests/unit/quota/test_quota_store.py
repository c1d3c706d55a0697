"""Client quotas in the embedded metadata store: kept through the journal and a snapshot, removed for good, and a
stored value that no longer validates set aside at load (never a failed start)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from rill.metadata.client_quotas import DEFAULT, QuotaEntity
from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.journal import JOURNAL_FILE, SNAPSHOT_FILE
from rill.metadata.store import BrokerInfo

APP = QuotaEntity(None, "app")
ALICE_ANY = QuotaEntity("alice", DEFAULT)


def _store(path: Path) -> EmbeddedMetadataStore:
    return EmbeddedMetadataStore(path, 1, BrokerInfo(1, "127.0.0.1", 9092))


def test_quotas_survive_the_journal_and_the_snapshot(tmp_path: Path) -> None:
    async def scenario() -> None:
        s = _store(tmp_path)
        s._journal._compact_after = 3
        await s.alter_client_quotas({APP: {"producer_byte_rate": 1024.0}, ALICE_ANY: {"request_percentage": 25.0}})
        version = s.client_quotas().version
        for i in range(5):
            await s.create_topic(f"t{i}", 1, 1, {})
        await s.alter_client_quotas({APP: {"producer_byte_rate": None, "consumer_byte_rate": 2048.0}})
        assert s.client_quotas().version > version
        await s.close()

    asyncio.run(scenario())
    snapshot = json.loads((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert snapshot["client_quotas"]["users/alice/clients/<default>"] == {"request_percentage": 25.0}
    reopened = _store(tmp_path).client_quotas()
    assert reopened.get(APP) == {"consumer_byte_rate": 2048.0}
    assert reopened.get(ALICE_ANY) == {"request_percentage": 25.0}


def test_a_stored_quota_that_does_not_validate_is_set_aside(tmp_path: Path) -> None:
    asyncio.run(_store(tmp_path).close())
    change = {"type": "client_quotas", "offset": 1,
              "entities": {"clients/app": {"producer_byte_rate": 1.5, "consumer_byte_rate": 10.0}}}  # fmt: skip
    with (tmp_path / JOURNAL_FILE).open("a") as f:
        f.write(json.dumps(change) + "\n")
    assert _store(tmp_path).client_quotas().get(APP) == {"consumer_byte_rate": 10.0}
