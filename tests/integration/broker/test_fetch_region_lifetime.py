"""A Fetch response being sent while the file it reads from is closed by the broker.

A consumer asks for megabytes and stops reading, so the broker waits in ``os.sendfile`` with most of the
response unsent. Meanwhile the segment it reads goes away: its topic is deleted, retention deletes it
(``file.delete.delay.ms`` = 0) or the log is truncated below it. Then another topic is created and
written, which opens new segment files. When the consumer reads on, the rest of the response must still
be the first topic's batches, every one of them: the response was cut from those files. (The broker used
to close the segment's descriptor at once; sendfile went on with its number, which the kernel had given
to the new topic's segment, and sent its batches, valid CRCs and all, labelled as the deleted topic's.)
"""

from __future__ import annotations

import asyncio
import logging
import select
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tests.integration.broker._wire import Wire

import rill.testing
from rill.common import TopicPartition
from rill.protocol import ApiKey, decode_response, encode_request
from rill.records.batch import crc_ok, iter_batches
from rill.records.builder import build_batch
from rill.records.record import Record, decode_batch_records

pytestmark = pytest.mark.timeout(120)

RECORD_BYTES = 1000
PER_BATCH = 64  # 64 KB batches
BATCHES = 64  # 4 MiB a topic: far more than the socket buffers hold
RESPONSE_MAX = 64 << 20


def _create(w: Wire, topic: str, configs: dict[str, str]) -> None:
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
        ],
        "timeout_ms": 5000,
        "validate_only": False,
    }
    result = w.call(ApiKey.CREATE_TOPICS, 5, body)["topics"][0]
    assert result["error_code"] == 0, result


def _fill(w: Wire, topic: str, tag: bytes) -> None:
    """BATCHES batches of PER_BATCH records whose values start with ``tag``."""
    now = int(time.time() * 1000)
    for n in range(BATCHES):
        records = [
            Record(0, now, None, tag + b":%06d:" % (n * PER_BATCH + i) + bytes(RECORD_BYTES), [])
            for i in range(PER_BATCH)
        ]
        body = {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": build_batch(records)}]}],
        }
        part = w.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"][0]
        assert part["error_code"] == 0, part


def _fetch_request(topic: str, offset: int) -> bytes:
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": RESPONSE_MAX,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": RESPONSE_MAX}],
            }
        ],
    }
    return encode_request(ApiKey.FETCH, 11, 7, "slow-reader", body)


def _incremental_alter(w: Wire, topic: str, name: str, value: str) -> None:
    body = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": topic,
                "configs": [{"name": name, "config_operation": 0, "value": value}],
            }
        ],
        "validate_only": False,
    }
    assert w.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]["error_code"] == 0


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def broker() -> Iterator[rill.testing.TestBroker]:
    # Small send buffers: the broker blocks in sendfile after a few hundred KB. Retention checked often.
    with rill.testing.broker(socket_send_buffer_bytes=65536, log_retention_check_interval_ms=100) as b:
        yield b


def _slow_fetch(b: rill.testing.TestBroker, admin: Wire, offset: int, change: Callable[[], None]) -> None:
    """Fetch topic ``a`` from ``offset`` without reading; run ``change``; create and fill ``b``; read the rest
    and check that every batch in it is ``a``'s."""
    reader = Wire(b.bootstrap_servers, timeout=30.0, receive_buffer=16384)
    try:
        reader.send_raw(_fetch_request("a", offset))
        assert select.select([reader.sock], [], [], 10)[0], "no response started"
        time.sleep(0.5)  # the broker fills the socket buffers and waits for room to write
        change()
        _create(admin, "b", {})
        _fill(admin, "b", b"b")
        frame = reader.read_frame()  # the rest of the response, read at last
    finally:
        reader.close()
    _, resp = decode_response(ApiKey.FETCH, 11, frame)
    part = resp["responses"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    records = bytes(part["records"])
    expected = BATCHES * PER_BATCH - offset
    seen = []
    for pos, header in iter_batches(records):
        assert crc_ok(records, pos, header)
        for record in decode_batch_records(records[pos : pos + header.size]):
            assert record.value is not None
            seen.append(record.value[:8])
    assert [v[:2] for v in seen] == [b"a:"] * expected, "the response carries records of another topic"
    assert seen == [b"a:%06d" % n for n in range(offset, BATCHES * PER_BATCH)]


def _on_loop(b: rill.testing.TestBroker, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on the broker's event loop (thread mode), where the log is used."""

    async def call() -> Any:
        return fn()

    loop = b.broker._background.get_loop()
    return asyncio.run_coroutine_threadsafe(call(), loop).result(10)


def test_topic_deleted_during_fetch(broker: rill.testing.TestBroker) -> None:
    admin = Wire(broker.bootstrap_servers, timeout=30.0)
    try:
        _create(admin, "a", {})
        _fill(admin, "a", b"a")

        def delete_a() -> None:
            got = admin.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["a"], "timeout_ms": 5000})["responses"]
            assert got[0]["error_code"] == 0, got

        _slow_fetch(broker, admin, 0, delete_a)
    finally:
        admin.close()


def test_segments_deleted_by_retention_during_fetch(broker: rill.testing.TestBroker) -> None:
    admin = Wire(broker.bootstrap_servers, timeout=30.0)
    try:
        _create(admin, "a", {"segment.bytes": str(1 << 20), "file.delete.delay.ms": "0", "retention.ms": "-1"})
        _fill(admin, "a", b"a")
        log_dir = broker.data_dir / "logs" / "a-0"
        assert len(list(log_dir.glob("*.log"))) >= 4

        def expire_a() -> None:
            _incremental_alter(admin, "a", "retention.ms", "1")
            # every old segment deleted, its files gone (the log rolled to an empty one)
            _wait(lambda: len(list(log_dir.glob("*.log*"))) == 1, "retention to delete a's segments")

        _slow_fetch(broker, admin, 0, expire_a)
    finally:
        admin.close()


def test_log_truncated_during_fetch(broker: rill.testing.TestBroker) -> None:
    admin = Wire(broker.bootstrap_servers, timeout=30.0)
    try:
        _create(admin, "a", {"segment.bytes": str(1 << 20), "file.delete.delay.ms": "0"})
        _fill(admin, "a", b"a")
        log_dir = broker.data_dir / "logs" / "a-0"
        assert len(list(log_dir.glob("*.log"))) >= 4

        def truncate_a() -> None:
            log = broker.broker.log_manager.get_log(TopicPartition("a", 0))
            # below the fetched range: every segment the response reads from goes
            assert _on_loop(broker, lambda: log.truncate_to(PER_BATCH))
            _wait(lambda: len(list(log_dir.glob("*.log*"))) == 1, "a's truncated segments to be deleted")

        _slow_fetch(broker, admin, BATCHES * PER_BATCH // 2, truncate_a)
    finally:
        admin.close()


def test_a_consumer_going_away_mid_response_is_no_warning(
    broker: rill.testing.TestBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rill.network")
    admin = Wire(broker.bootstrap_servers, timeout=30.0)
    try:
        _create(admin, "a", {})
        _fill(admin, "a", b"a")
    finally:
        admin.close()
    reader = Wire(broker.bootstrap_servers, timeout=30.0, receive_buffer=16384)
    reader.send_raw(_fetch_request("a", 0))
    assert select.select([reader.sock], [], [], 10)[0], "no response started"
    time.sleep(0.3)
    reader.close()  # with unread bytes: the kernel resets the connection, the broker's sendfile fails

    def sendfile_failed() -> bool:
        return any("sendfile failed" in r.getMessage() for r in caplog.records)

    _wait(sendfile_failed, "the broker to notice the consumer went away", 10)
    failures = [r for r in caplog.records if "sendfile failed" in r.getMessage()]
    assert all(r.levelno == logging.DEBUG for r in failures), [(r.levelname, r.getMessage()) for r in failures]
