"""What the leader checks in a Produce before it writes, seen from real clients and raw requests: a
compressed batch whose records do not decompress is refused (CORRUPT_MESSAGE) on every topic, so it
never reaches the log where every consumer would stop at it; valid compressed batches from real
clients are taken; a batch refused for some of its records names every one of them."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import Consumer, Producer
from crc32c import crc32c
from kafka import KafkaProducer
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.records.builder import build_batch
from rill.records.compression import CODEC_IDS, compress
from rill.records.record import Record, encode_record

pytestmark = pytest.mark.timeout(120)

CODECS = ["gzip", "snappy", "lz4", "zstd"]
TS = 1_700_000_000_000


def _produce(w: Wire, topic: str, batch: bytes, version: int = 9) -> dict:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return w.call(ApiKey.PRODUCE, version, body)["responses"][0]["partition_responses"][0]


def _create(w: Wire, topic: str, configs: dict[str, str] | None = None) -> None:
    topics = [
        {
            "name": topic,
            "num_partitions": 1,
            "replication_factor": 1,
            "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }
    ]
    result = w.call(ApiKey.CREATE_TOPICS, 5, {"topics": topics, "timeout_ms": 5000, "validate_only": False})
    assert result["topics"][0]["error_code"] == 0, result


def _section(n: int, key: bytes | None = b"k") -> bytes:
    out = bytearray()
    for i in range(n):
        encode_record(out, i, i, key, b"value-%d" % i)
    return bytes(out)


def _flagged(codec: int, body: bytes, count: int) -> bytes:
    """A batch whose attributes name ``codec`` around ``body`` as it is, with a right CRC32C: only
    decompressing its records tells it from a good one."""
    length = 49 + len(body)
    header = struct.pack(">qiibIhiqqqhii", 0, length, -1, 2, 0, codec, count - 1, TS, TS + count - 1, -1, -1, -1, count)
    batch = bytearray(header + body)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def _consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec_name", CODECS)
def test_a_compressed_batch_that_does_not_decompress_is_refused(rill_broker, codec_name: str) -> None:
    codec = CODEC_IDS[codec_name]
    topic = f"corrupt-{codec_name}"
    good = compress(codec, _section(5))
    bodies = [
        bytes((i * 37 + 11) % 256 for i in range(len(good))),  # garbage
        good[: len(good) // 2],  # cut in half
        good[: len(good) - 3],  # cut short
        good + b"\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09",  # bytes after the end
        b"",  # nothing at all
    ]
    w = Wire(rill_broker.bootstrap_servers)
    try:
        _create(w, topic)
        # Produce takes zstd from v7 on (before: UNSUPPORTED_COMPRESSION_TYPE, whatever the records)
        versions = (7, 9) if codec_name == "zstd" else (3, 9)
        for body in bodies:
            for version in versions:
                resp = _produce(w, topic, _flagged(codec, body, 5), version)
                assert resp["error_code"] == ErrorCode.CORRUPT_MESSAGE, (body[:16], resp)
        assert _produce(w, topic, _flagged(codec, good, 5))["error_code"] == 0
    finally:
        w.close()
    # Nothing of the refused batches reached the log: a consumer reads the good batch, and only it.
    assert _consume(rill_broker.bootstrap_servers, topic, 5) == [b"value-%d" % i for i in range(5)]


@pytest.mark.parametrize("codec_name", CODECS)
def test_compressed_batches_from_real_clients_are_taken(rill_broker, codec_name: str) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = f"clients-{codec_name}"
    values = [b"rec-%d-" % i + b"x" * (i % 300) for i in range(2000)]
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec_name, "linger.ms": 20})
    failed: list[object] = []
    for v in values[:1000]:
        producer.produce(topic, v, on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(30) == 0 and failed == []
    kp = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec_name, linger_ms=20)
    futures = [kp.send(topic, v) for v in values[1000:]]
    kp.flush(30)
    for f in futures:
        f.get(10)
    kp.close()
    assert _consume(bootstrap, topic, len(values)) == values


def test_every_refused_record_is_named_in_record_errors(rill_broker) -> None:
    """Kafka's LogValidator names every record it refuses in RecordErrors, so a client fails exactly
    those records with the error and the rest of the batch with its own "other record" error."""
    w = Wire(rill_broker.bootstrap_servers)
    try:
        _create(w, "compact-all", {"cleanup.policy": "compact"})
        for codec in (0, CODEC_IDS["zstd"]):
            keyless = build_batch([Record(0, TS, None, b"v%d" % i) for i in range(10)], compression=codec)
            resp = _produce(w, "compact-all", keyless)
            assert resp["error_code"] == ErrorCode.INVALID_RECORD
            assert [e["batch_index"] for e in resp["record_errors"]] == list(range(10))
            assert all("no key" in e["batch_index_error_message"] for e in resp["record_errors"])
            mixed = [Record(0, TS, None if i % 3 == 0 else b"k", b"v") for i in range(10)]
            resp = _produce(w, "compact-all", build_batch(mixed, compression=codec))
            assert [e["batch_index"] for e in resp["record_errors"]] == [0, 3, 6, 9]
            assert "record 0 of batch 0" in resp["error_message"]

        _create(w, "bounded-all", {"message.timestamp.after.max.ms": "60000"})
        now = int(time.time() * 1000)
        # records 1, 3 and 4 are an hour too new; record 2 has no key (fine on this topic)
        times = [now, now + 3_600_000, now, now + 3_600_000, now + 7_200_000]
        records = [Record(0, t, b"k" if i != 2 else None, b"v") for i, t in enumerate(times)]
        resp = _produce(w, "bounded-all", build_batch(records, compression=CODEC_IDS["lz4"]))
        assert resp["error_code"] == ErrorCode.INVALID_TIMESTAMP
        assert [e["batch_index"] for e in resp["record_errors"]] == [1, 3, 4]
        assert f"CreateTime {now + 7_200_000}" in resp["record_errors"][2]["batch_index_error_message"]
    finally:
        w.close()
