"""Share groups across failures: a share consumer SIGKILLed while holding records (they come back after the
lock duration), and a broker SIGKILLed and restarted (no acknowledged record is delivered again, every
unacknowledged one is)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.share._share import SHORT_LOCKS, poll_until, produce, share_consumer, warm_up

import rill.testing

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

HOLDER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": "sg", "share.acknowledgement.mode": "explicit"})
    c.subscribe(["t"])
    held = []
    while not held:  # explicit mode: no further poll until these are acknowledged, which they never are
        held = c.poll(0.5)
    print("held", flush=True)
    time.sleep(600)
""")


def _create(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("t", 1)])["t"].result(10)


def test_killed_consumer_records_come_back_after_the_lock() -> None:
    with rill.testing.broker(SHORT_LOCKS) as b:
        _create(b.bootstrap_servers)
        first = share_consumer(b.bootstrap_servers, "sg", ["t"])
        warm_up(b.bootstrap_servers, first, "t", 1)
        first.close()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, b.bootstrap_servers],
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            produce(b.bootstrap_servers, "t", [(0, b"k%d" % i) for i in range(5)])
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(10)
            other = share_consumer(b.bootstrap_servers, "sg", ["t"])
            try:
                again = poll_until(other, 5)
                assert sorted(m.value() for m in again) == [b"k%d" % i for i in range(5)]
            finally:
                other.close()
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait(10)


def test_broker_killed_loses_no_acknowledgement() -> None:
    with rill.testing.broker(SHORT_LOCKS, subprocess=True) as b:
        _create(b.bootstrap_servers)
        c = share_consumer(b.bootstrap_servers, "sg", ["t"], explicit=True)
        try:
            warm_up(b.bootstrap_servers, c, "t", 1, explicit=True)
            produce(b.bootstrap_servers, "t", [(0, b"a%d" % i) for i in range(5)])
            accepted: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(accepted) < 5:
                assert time.monotonic() < deadline, accepted
                msgs = list(c.poll(0.5))
                for m in msgs:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                    accepted.append(m.value())
                if msgs:
                    assert all(e is None for e in c.commit_sync(10).values())
            produce(b.bootstrap_servers, "t", [(0, b"h%d" % i) for i in range(5)])
            held: list[Any] = []
            while not held:  # acquired and never acknowledged
                assert time.monotonic() < deadline
                held = list(c.poll(0.5))
            b.kill()
            b.start()
        finally:
            c.close()  # after the restart: a close against a dead broker waits out its timeouts
        after = share_consumer(b.bootstrap_servers, "sg", ["t"])
        try:
            again = poll_until(after, 5)
            assert sorted(m.value() for m in again) == [b"h%d" % i for i in range(5)]
            assert not [m for m in after.poll(2.0) if m.value() != b"warm"]
        finally:
            after.close()
