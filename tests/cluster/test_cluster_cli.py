"""``rill cluster up`` as a subprocess: ZooKeeper and N brokers on loopback ports, usable with RF=3 topics,
stopped in order by Ctrl-C (SIGINT to its whole process group, as a terminal sends it) or SIGTERM, and started
again on the same ``--data`` directory with the records still there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _up(data: Path, brokers: int = 3) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen([sys.executable, "-m", "rill", "cluster", "up", "--brokers", str(brokers), "--data",
                             str(data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    lines: dict[str, str] = {}
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        key, _, value = line.strip().partition(" ")
        if line.startswith("bootstrap.servers="):
            key, _, value = line.strip().partition("=")
        lines[key] = value
        if line.startswith("rill cluster ready") or time.monotonic() > deadline:
            break
    assert "bootstrap.servers" in lines, (lines, proc.poll(), proc.stderr.read() if proc.stderr else "")
    return proc, lines


def _stop(proc: subprocess.Popen[str], how: signal.Signals) -> float:
    t0 = time.monotonic()
    if how == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
    else:
        proc.send_signal(how)
    try:
        code = proc.wait(40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    took = time.monotonic() - t0
    assert code == 0, proc.stderr.read() if proc.stderr else code
    return took


def _children_gone(data: Path) -> bool:
    out = subprocess.run(["pgrep", "-f", str(data)], capture_output=True, text=True).stdout.split()
    return not out


def test_cluster_up_serves_rf3_topics_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "cluster"
    proc, lines = _up(data)
    try:
        bootstrap = lines["bootstrap.servers"]
        assert len(bootstrap.split(",")) == 3 and all(a.startswith("127.0.0.1:") for a in bootstrap.split(","))
        assert lines["zookeeper"].startswith("127.0.0.1:")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("up", 2, 3, config={"min.insync.replicas": "2"})])["up"].result(40)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        for i in range(100):
            producer.produce("up", str(i).encode(), partition=i % 2)
        assert producer.flush(30) == 0
        md = admin.list_topics("up", timeout=10).topics["up"]
        assert all(sorted(p.isrs) == [0, 1, 2] for p in md.partitions.values())
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    took = _stop(proc, signal.SIGINT)
    print(f"rill cluster up stopped by Ctrl-C in {took:.1f} s")
    assert took < 15
    assert _children_gone(data)
    for b in range(3):  # each broker stopped in a controlled way, ZooKeeper still up
        log = (data / f"broker-{b}" / "broker.log").read_text()
        assert "Controlled shutdown: leadership moved off" in log, log[-2000:]
        assert "controlled shutdown could not mark" not in log and "still leads partitions" not in log
    # the same data directory: the same cluster, with the records
    proc, lines = _up(data)
    try:
        consumer = Consumer({"bootstrap.servers": lines["bootstrap.servers"], "group.id": "up-check",
                             "enable.partition.eof": True})  # fmt: skip
        consumer.assign([TopicPartition("up", p, 0) for p in range(2)])
        seen: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                eof.add(msg.partition())
                continue
            seen.append(msg.value())
        consumer.close()
        assert sorted(int(v) for v in seen) == list(range(100))
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert _stop(proc, signal.SIGTERM) < 15
    assert _children_gone(data)


def test_cluster_up_refuses_bad_options(tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-m", "rill", "cluster", "up", "--override", "num.partiton=3"],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert bad.returncode == 2 and "did you mean 'num.partitions'" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "rill", "cluster", "up", "--brokers", "0"],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert bad.returncode == 2 and "--brokers" in bad.stderr
