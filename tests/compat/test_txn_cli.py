"""``rill transactions`` as a process against a broker: list, describe and describe-producers of a live
transaction, a hanging transaction found by find-hanging and ended by abort (by start offset and by ids)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from tests.compat._txn import BROKER_CONFIGS, create_topic, end_offsets, read_partition, txn_producer

from rill.client import KafkaClient
from rill.common import TopicPartition
from rill.errors import ErrorCode
from rill.records.builder import build_batch
from rill.records.record import Record

# No KIP-890 verification, so a producer can leave a transaction on a partition that no coordinator knows:
# the hanging transaction that find-hanging and abort are for.
pytestmark = pytest.mark.rill_broker_config({**BROKER_CONFIGS, "transaction.partition.verification.enable": "false"})


def rill(bootstrap: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [sys.executable, "-m", "rill", "transactions", "--bootstrap-server", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ok:
        assert res.returncode == 0, res.stderr
    return res


def rill_json(bootstrap: str, *args: str) -> Any:
    return json.loads(rill(bootstrap, *args, "--json").stdout)


def hanging_transaction(bootstrap: str, tp: TopicPartition, n: int) -> tuple[int, int]:
    """A transactional batch appended without AddPartitionsToTxn: (producer id, epoch)."""
    with KafkaClient(bootstrap, timeout_s=20) as client:
        pid, epoch = client.init_producer_id()
        batch = build_batch(
            [Record(i, int(time.time() * 1000), None, b"hanging-%d" % i, []) for i in range(n)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )
        result = client.produce({tp: batch}, transactional_id="no-such-coordinator-knows-me")
        assert result[tp][0] == ErrorCode.NONE, result
    return pid, epoch


def test_transactions_cli(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "cli-t", 3)
    with KafkaClient(bootstrap, timeout_s=20) as client:
        (broker_id,) = client.refresh_metadata(None).brokers

    p = txn_producer(bootstrap, "cli-app")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("cli-t", b"open", partition=0)
    p.flush(30)

    listed = {t["transactional_id"]: t for t in rill_json(bootstrap, "list")}
    assert listed["cli-app"]["state"] == "Ongoing"
    assert listed["cli-app"]["coordinator"] == broker_id
    table = rill(bootstrap, "list").stdout
    assert table.splitlines()[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    described = rill_json(bootstrap, "describe", "--transactional-id", "cli-app")
    assert described["state"] == "Ongoing"
    assert described["partitions"] == ["cli-t-0"]
    assert described["producer_id"] == listed["cli-app"]["producer_id"]
    producers = rill_json(bootstrap, "describe-producers", "--topic", "cli-t", "--partition", "0")
    (mine,) = [s for s in producers if s["producer_id"] == described["producer_id"]]
    assert mine["current_transaction_start_offset"] == 0
    # A transaction in progress at its coordinator is not hanging, however old.
    assert rill_json(bootstrap, "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0") == []
    p.commit_transaction(30)
    assert rill_json(bootstrap, "describe", "--transactional-id", "cli-app")["state"] == "CompleteCommit"

    # Two hanging transactions: the coordinator never heard of them; they hold back read_committed readers.
    pid1, epoch1 = hanging_transaction(bootstrap, TopicPartition("cli-t", 1), 3)
    pid2, epoch2 = hanging_transaction(bootstrap, TopicPartition("cli-t", 2), 2)
    assert end_offsets(bootstrap, "cli-t", 1, committed=True) == 0
    assert rill_json(bootstrap, "find-hanging", "--broker-id", str(broker_id)) == []  # not 15 minutes old yet
    found = rill_json(bootstrap, "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0")
    assert sorted((h["topic"], h["partition"], h["producer_id"], h["start_offset"]) for h in found) == [
        ("cli-t", 1, pid1, 0),
        ("cli-t", 2, pid2, 0),
    ]
    by_topic = rill_json(
        bootstrap, "find-hanging", "--topic", "cli-t", "--partition", "2", "--max-transaction-timeout", "0"
    )
    assert [h["producer_id"] for h in by_topic] == [pid2]

    out = rill(bootstrap, "abort", "--topic", "cli-t", "--partition", "1", "--start-offset", "0").stdout
    assert f"producer {pid1}" in out
    (state2,) = [s for s in rill_json(bootstrap, "describe-producers", "--topic", "cli-t", "--partition", "2")]
    assert (state2["producer_id"], state2["producer_epoch"]) == (pid2, epoch2)
    rill(
        bootstrap, "abort", "--topic", "cli-t", "--partition", "2", "--producer-id", str(pid2),
        "--producer-epoch", str(epoch2), "--coordinator-epoch", str(state2["coordinator_epoch"]),
    )  # fmt: skip
    assert rill_json(bootstrap, "find-hanging", "--broker-id", str(broker_id), "--max-transaction-timeout", "0") == []
    # The markers moved the last stable offsets past the aborted records, which read_committed skips.
    assert end_offsets(bootstrap, "cli-t", 1, committed=True) == 4
    assert read_partition(bootstrap, "cli-t", 1) == []
    assert read_partition(bootstrap, "cli-t", 1, committed=False) == [b"hanging-0", b"hanging-1", b"hanging-2"]
    assert read_partition(bootstrap, "cli-t", 0) == [b"open"]
    assert epoch1 >= 0


def test_usage_errors(rill_broker, tmp_path) -> None:
    bootstrap = rill_broker.bootstrap_servers
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    res = rill(bootstrap, "list", "--command-config", str(config), ok=False)
    assert res.returncode == 1 and "sasl.jaas.config must give the username and password for PLAIN" in res.stderr
    res = rill(bootstrap, "abort", "--topic", "t", "--partition", "0", "--producer-id", "5", ok=False)
    assert res.returncode == 2
    assert "--start-offset or all of --producer-id" in res.stderr
    res = rill(bootstrap, "find-hanging", ok=False)
    assert res.returncode == 2 and "--broker-id or --topic" in res.stderr
    res = rill(bootstrap, "describe", "--transactional-id", "never-used", ok=False)
    assert res.returncode == 1 and res.stderr.startswith("error: ")
