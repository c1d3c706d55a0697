"""Stopping a broker does not wait for requests that wait by design: a long-polling Fetch and a
JoinGroup waiting for the rebalance end at once, so a test's teardown takes milliseconds."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey, decode_response, encode_request

pytestmark = pytest.mark.timeout(90)


def wait_until(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.02)


def produce_one(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    p.produce(topic, b"x")
    assert p.flush(15) == 0


@pytest.mark.parametrize("consumer_closed", [True, False], ids=["closed-consumer", "open-consumer"])
def test_stop_ends_a_long_polling_fetch_at_once(consumer_closed: bool, caplog: pytest.LogCaptureFixture) -> None:
    with rill.testing.broker(num_partitions=1) as b:
        produce_one(b.bootstrap_servers, "t")
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "group.id": "g",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 8000,
            }
        )
        try:
            c.assign([TopicPartition("t", 0, 0)])
            deadline = time.monotonic() + 15
            while (m := c.poll(0.2)) is None or m.error() is not None:
                assert time.monotonic() < deadline
            purgatory = b.broker.replica_manager.fetch_purgatory
            wait_until(lambda: purgatory.size > 0)  # the next fetch waits (up to 8 s) for data
            if consumer_closed:
                c.close()
            caplog.set_level(logging.INFO, logger="rill")
            started = time.monotonic()
            b.stop()
            elapsed = time.monotonic() - started
        finally:
            if not consumer_closed:
                c.close()
    assert elapsed < 1.0, f"stop took {elapsed:.2f}s"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("rill")]


def _join(instance: str) -> dict[str, Any]:
    return {
        "group_id": "pj",
        "session_timeout_ms": 30_000,
        "rebalance_timeout_ms": 60_000,
        "member_id": "",
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
    }


def test_stop_answers_a_join_group_waiting_for_the_rebalance() -> None:
    with rill.testing.broker() as b:
        first, second = Wire(b.bootstrap_servers, timeout=30), Wire(b.bootstrap_servers, timeout=30)
        try:
            joined = first.call(ApiKey.JOIN_GROUP, 5, _join("first"))
            assert joined["error_code"] == 0, joined
            member, generation = joined["member_id"], joined["generation_id"]
            synced = first.call(
                ApiKey.SYNC_GROUP,
                3,
                {
                    "group_id": "pj",
                    "generation_id": generation,
                    "member_id": member,
                    "group_instance_id": "first",
                    "assignments": [{"member_id": member, "assignment": b""}],
                },
            )
            assert synced["error_code"] == 0, synced
            # A new member: its JoinGroup waits (up to 60 s) for the first member to rejoin, which it never does.
            second.send_raw(encode_request(ApiKey.JOIN_GROUP, 5, 1, "wire-test", _join("second")))
            groups = b.broker.services.group_coordinator.groups
            wait_until(lambda: groups["pj"].num_awaiting_join() > 0)
            started = time.monotonic()
            b.stop()
            elapsed = time.monotonic() - started
            _, answer = decode_response(ApiKey.JOIN_GROUP, 5, second.read_frame())
        finally:
            first.close()
            second.close()
    assert elapsed < 2.0, f"stop took {elapsed:.2f}s"
    assert answer["error_code"] == ErrorCode.NOT_COORDINATOR
