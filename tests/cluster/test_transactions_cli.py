"""``rill transactions`` on a 3-broker cluster: ListTransactions gathered from every broker, DescribeTransactions
from the id's coordinator, DescribeProducers and the abort marker sent to each partition's leader, whichever
broker the command bootstraps from."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from rill.cli._txn_admin import coordinator_of
from rill.client import KafkaClient
from rill.common import TopicPartition
from rill.errors import ErrorCode
from rill.records.builder import build_batch
from rill.records.record import Record
from rill.testing.cluster import TestCluster, cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CONFIGS = {
    "transaction.state.log.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "min.insync.replicas": "2",
    # A producer that writes without AddPartitionsToTxn leaves the hanging transaction this test ends.
    "transaction.partition.verification.enable": "false",
}


def _rill(bootstrap: str, *args: str) -> Any:
    res = subprocess.run(
        [sys.executable, "-m", "rill", "transactions", *args, "--bootstrap-server", bootstrap, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _abort(bootstrap: str, *args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "rill", "transactions", "abort", *args, "--bootstrap-server", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def _coordinator(bootstrap: str, transactional_id: str) -> int:
    with KafkaClient(bootstrap, timeout_s=20) as client:
        return coordinator_of(client, transactional_id)


def test_list_describe_and_abort_across_brokers() -> None:
    with cluster(3, CONFIGS) as c:
        run(c)


def run(c: TestCluster) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic("cl-t", 3, 3)])["cl-t"].result(30)
    producers = []
    for i in range(4):  # ids spread over the coordinators
        p = ck.Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": f"cl-app-{i}"})
        p.init_transactions(60)
        p.begin_transaction()
        p.produce("cl-t", b"open-%d" % i, partition=i % 3)
        p.flush(30)
        producers.append(p)
    coordinators = {f"cl-app-{i}": _coordinator(c.bootstrap_servers, f"cl-app-{i}") for i in range(4)}
    assert len(set(coordinators.values())) > 1, coordinators  # the list has to gather them from several brokers
    for broker_id in c.brokers:  # any broker as the bootstrap: the same answers
        one = f"127.0.0.1:{c.broker(broker_id).port}"
        listed = {t["transactional_id"]: t for t in _rill(one, "list")}
        assert {tid: t["coordinator"] for tid, t in listed.items() if tid.startswith("cl-app-")} == coordinators
        assert all(listed[tid]["state"] == "Ongoing" for tid in coordinators)
        described = _rill(one, "describe", "--transactional-id", "cl-app-2")
        assert (described["coordinator"], described["partitions"]) == (coordinators["cl-app-2"], ["cl-t-2"])
    for p in producers:
        p.commit_transaction(30)

    # A hanging transaction on a partition whose leader is not the first broker of the bootstrap list.
    tp = TopicPartition("cl-t", next(p for p in range(3) if c.leader("cl-t", p) != c.brokers[0]))
    with KafkaClient(c.bootstrap_servers, timeout_s=20) as client:
        pid, epoch = client.init_producer_id()
        batch = build_batch(
            [Record(0, int(time.time() * 1000), None, b"hanging", [])],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )
        assert client.produce({tp: batch}, transactional_id="unknown")[tp][0] == ErrorCode.NONE
    first = f"127.0.0.1:{c.broker(c.brokers[0]).port}"
    leader = c.leader(tp.topic, tp.partition)
    found = _rill(first, "find-hanging", "--broker-id", str(leader), "--max-transaction-timeout", "0")
    assert [(h["partition"], h["producer_id"]) for h in found] == [(tp.partition, pid)]
    start = found[0]["start_offset"]
    out = _abort(first, "--topic", "cl-t", "--partition", str(tp.partition), "--start-offset", str(start))
    assert f"producer {pid}" in out
    assert _rill(first, "find-hanging", "--broker-id", str(leader), "--max-transaction-timeout", "0") == []
    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "cl-lso"})
    try:
        lso = consumer.get_watermark_offsets(ck.TopicPartition("cl-t", tp.partition), timeout=10)[1]
    finally:
        consumer.close()
    assert lso == start + 2  # past the hanging record and its abort marker
