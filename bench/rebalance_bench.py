"""Rebalance time of the two group protocols in one run: KIP-848's consumer protocol (server-side `uniform`
assignor) against the classic protocol with `cooperative-sticky`.

`python bench/rebalance_bench.py [--members N] [--partitions P] [--rounds R]`

One broker (in this process's thread, `rill.testing.broker`), a topic of `--partitions` (20) partitions, and
per round and protocol a new group of `--members` (10) confluent-kafka consumers, each polled by its own thread.
Once the group is settled, three changes are timed, each from the moment of the change until every partition is
owned by exactly one member and the group's assignment no longer changes (polled every 5 ms):
- join: one more member subscribes;
- leave: one member closes (a clean leave);
- the protocols alternate within each round. Heartbeat interval 100 ms for both (the consumer protocol's is the
  broker's `group.consumer.heartbeat.interval.ms`, the classic one the client's `heartbeat.interval.ms`),
  `group.initial.rebalance.delay.ms=0`. Prints the median of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

import rill.testing

BROKER_CONFIGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "100",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "1000",
}
SETTLE_S = 0.3  # the assignment must hold this long to count as settled


class Member(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topic: str, protocol: str) -> None:
        super().__init__(daemon=True)
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
        if protocol == "consumer":
            conf.update({"group.protocol": "consumer", "group.remote.assignor": "uniform"})
        else:
            conf.update({"partition.assignment.strategy": "cooperative-sticky", "heartbeat.interval.ms": 100,
                         "session.timeout.ms": 10000})  # fmt: skip
        self.consumer = confluent_kafka.Consumer(conf)
        self.topic = topic
        self.owned: set[int] = set()
        self.lock = threading.Lock()
        self.stop_event = threading.Event()

    def run(self) -> None:
        def assigned(_c: Any, ps: list[Any]) -> None:
            with self.lock:
                self.owned |= {p.partition for p in ps}

        def revoked(_c: Any, ps: list[Any]) -> None:
            with self.lock:
                self.owned -= {p.partition for p in ps}

        self.consumer.subscribe([self.topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        while not self.stop_event.is_set():
            self.consumer.poll(0.02)
        self.consumer.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)


def _snapshot(members: list[Member]) -> tuple[tuple[int, ...], ...]:
    out = []
    for m in members:
        with m.lock:
            out.append(tuple(sorted(m.owned)))
    return tuple(out)


def _settled(members: list[Member], partitions: int, since: float, timeout: float = 60.0) -> float:
    """Seconds from ``since`` until every partition is owned once and the assignment held for SETTLE_S."""
    deadline = time.monotonic() + timeout
    last, last_change = None, time.monotonic()
    while time.monotonic() < deadline:
        snap = _snapshot(members)
        if snap != last:
            last, last_change = snap, time.monotonic()
        owned = [p for ps in snap for p in ps]
        complete = sorted(owned) == list(range(partitions)) and all(snap)
        if complete and time.monotonic() - last_change >= SETTLE_S:
            return last_change - since
        time.sleep(0.005)
    raise TimeoutError("the group did not settle")


def one_round(bootstrap: str, topic: str, protocol: str, n: int, partitions: int) -> tuple[float, float]:
    group = f"bench-{protocol}-{uuid.uuid4().hex[:6]}"
    members = [Member(bootstrap, group, topic, protocol) for _ in range(n)]
    for m in members:
        m.start()
    _settled(members, partitions, time.monotonic(), 120)
    newcomer = Member(bootstrap, group, topic, protocol)
    started = time.monotonic()
    newcomer.start()
    members.append(newcomer)
    join = _settled(members, partitions, started)
    leaving = members.pop(0)
    started = time.monotonic()
    leaving.stop()
    leave = _settled(members, partitions, started)
    for m in members:
        m.stop()
    return join, leave


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"consumer": [], "classic": []}
    with rill.testing.broker(BROKER_CONFIGS) as broker:
        bs = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("rebalance-bench", args.partitions, 1)])["rebalance-bench"].result(30)
        for r in range(args.rounds):
            order = ("consumer", "classic") if r % 2 == 0 else ("classic", "consumer")
            for protocol in order:
                results[protocol].append(one_round(bs, "rebalance-bench", protocol, args.members, args.partitions))
                print(protocol, "round", r, "join {:.3f} s, leave {:.3f} s".format(*results[protocol][-1]), flush=True)
    for protocol, runs in results.items():
        join = statistics.median(j for j, _ in runs)
        leave = statistics.median(lv for _, lv in runs)
        print(f"{protocol}: join {join:.3f} s, leave {leave:.3f} s (medians of {len(runs)})")


if __name__ == "__main__":
    main()
