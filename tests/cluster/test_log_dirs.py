"""AlterReplicaLogDirs in a replicated cluster: a follower's replica moves between its broker's log dirs while
the leader takes acks=all writes (the copy follows the follower's own appends and the swap happens under its
fetches), the follower killed (SIGKILL) in the middle of the copy and started again goes on with the move, and
a reassignment that names a log dir for a new replica (kafka-reassign-partitions.sh's ``log_dirs``) has that
replica made there."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.testing.cluster import cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _alter(bootstrap: str, path: Path, topic: str) -> int:
    w = Wire(bootstrap)
    try:
        body = {"dirs": [{"path": str(path), "topics": [{"name": topic, "partitions": [0]}]}]}
        return int(w.call(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)["results"][0]["partitions"][0]["error_code"])
    finally:
        w.close()


def _replica_dirs(bootstrap: str, topic: str) -> list[tuple[str, bool]]:
    w = Wire(bootstrap)
    try:
        r = w.call(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": [0]}]})
    finally:
        w.close()
    return sorted((d["log_dir"], p["is_future_key"]) for d in r["results"] for t in d["topics"]
                  for p in t["partitions"])  # fmt: skip


def test_a_follower_moves_between_its_log_dirs_and_a_reassignment_places_a_replica(tmp_path: Path) -> None:
    dirs = {i: (tmp_path / f"b{i}" / "a", tmp_path / f"b{i}" / "b") for i in range(2)}
    # the copy's first 1 MiB step, then a wait of about 50 s: the kill lands in the middle of the copy
    overrides = {i: {"log.dirs": f"{a},{b}", "replica.alter.log.dirs.io.max.bytes.per.second": "20000"}
                 for i, (a, b) in dirs.items()}  # fmt: skip
    with cluster(2, broker_overrides=overrides, auto_leader_rebalance_enable="false") as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        created = admin.create_topics([NewTopic("r", 1, replica_assignment=[[0, 1]],
                                                config={"min.insync.replicas": "2"}),
                                       NewTopic("grow", 1, replica_assignment=[[0]])])  # fmt: skip
        for f in created.values():
            f.result(30)
        c.wait_for(lambda: sorted(c.isr("r", 0)) == [0, 1], 60, "both replicas of r in the ISR")
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 2})  # fmt: skip
        acked: dict[int, bytes] = {}
        errors: list[str] = []

        def cb(err: object, msg: object) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

        def unthrottle() -> None:  # the cluster-wide default of the dynamic broker config, over the static one
            w = Wire(c.broker(c.leader("r", 0)).bootstrap_servers)
            try:
                configs = [{"name": "replica.alter.log.dirs.io.max.bytes.per.second", "config_operation": 0,
                            "value": str(10**12)}]  # fmt: skip
                body = {"resources": [{"resource_type": 4, "resource_name": "", "configs": configs}],
                        "validate_only": False}  # fmt: skip
                assert w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]["error_code"] == 0
            finally:
                w.close()

        for i in range(3000):
            producer.produce("r", value=b"before-%d-" % i + b"p" * 1000, on_delivery=cb)
        assert producer.flush(30) == 0
        follower = 1 if c.leader("r", 0) == 0 else 0
        a, b = dirs[follower]
        source, dest = (a, b) if (a / "r-0").is_dir() else (b, a)
        assert _alter(c.broker(follower).bootstrap_servers, dest, "r") == 0
        c.wait_for(lambda: any(f.stat().st_size for d in dest.glob("r-0.*-future") for f in d.glob("*.log")), 60,
                   "the follower's copy to begin")  # fmt: skip
        c.kill(follower)  # SIGKILL in the middle of the copy
        unthrottle()
        c.start(follower)
        deadline = time.monotonic() + 60
        i = 0
        while _replica_dirs(c.broker(follower).bootstrap_servers, "r") != [(str(dest), False)]:
            assert time.monotonic() < deadline, "the follower's move did not end"
            producer.produce("r", value=b"during-%d" % i, on_delivery=cb)
            producer.poll(0.001)
            i += 1
        for j in range(500):
            producer.produce("r", value=b"after-%d" % j, on_delivery=cb)
        assert producer.flush(30) == 0 and errors == []
        assert not (source / "r-0").exists()
        c.wait_for(lambda: sorted(c.isr("r", 0)) == [0, 1], 60, "the moved follower in the ISR")
        # the leader goes: the moved follower leads with every acknowledged record
        c.kill(c.leader("r", 0))
        c.wait_for(lambda: c.leader("r", 0) == follower, 60, "the moved follower leading")
        consumer = Consumer({"bootstrap.servers": c.broker(follower).bootstrap_servers, "group.id": "check",
                             "enable.auto.commit": False})  # fmt: skip
        consumer.assign([TopicPartition("r", 0, 0)])
        got: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(acked) and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None:
                    got[m.offset()] = m.value()
        consumer.close()
        assert [o for o in acked if got.get(o) != acked[o]] == []

        # a log dir named for a replica a reassignment is about to add: made there, not where it would go
        c.start(1 - follower)
        c.wait_for(lambda: c.leader("grow", 0) == 0, 60, "grow led by broker 0")
        target = 1
        ta, tb = dirs[target]

        def logs(d: Path) -> int:
            return sum(1 for x in d.iterdir() if x.is_dir() and x.name.rpartition("-")[2].isdigit())

        wanted = ta if logs(ta) > logs(tb) else tb  # not the dir the broker would choose (the one with fewer logs)
        assert _alter(c.broker(target).bootstrap_servers, wanted, "grow") == ErrorCode.REPLICA_NOT_AVAILABLE
        w = Wire(c.broker(0).bootstrap_servers)
        try:
            body = {"timeout_ms": 30000, "topics": [{"name": "grow", "partitions": [
                {"partition_index": 0, "replicas": [0, 1]}]}]}  # fmt: skip
            assert w.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)["responses"][0]["partitions"][0][
                "error_code"] == 0  # fmt: skip
        finally:
            w.close()
        c.wait_for(lambda: sorted(c.isr("grow", 0)) == [0, 1], 60, "grow on both brokers")
        assert (wanted / "grow-0").is_dir()
