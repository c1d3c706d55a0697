"""Broker behaviour at the protocol's edges, driven with exact requests over a real socket."""

from __future__ import annotations

import struct
import threading
import time

import pytest
import zstandard
from crc32c import crc32c
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import MESSAGES, ApiKey, decode_response
from rill.records.batch import parse_header, set_log_append_time
from rill.records.builder import build_batch
from rill.records.record import Record, decode_batch_records


def _records(n: int, start: int = 0) -> list[Record]:
    return [Record(0, 1_700_000_000_000 + i, f"k{i}".encode(), f"v{start + i}".encode(), []) for i in range(n)]


def _produce(w: Wire, topic: str, batch: bytes, acks: int = -1, version: int = 9) -> dict:
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    resp = w.call(ApiKey.PRODUCE, version, body)
    return resp["responses"][0]["partition_responses"][0]


def _fetch(w: Wire, topic: str, offset: int, max_wait_ms: int = 0, min_bytes: int = 0) -> dict:
    body = {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}
        ],
    }
    return w.call(ApiKey.FETCH, 11, body)["responses"][0]["partitions"][0]


def _create(w: Wire, topic: str, configs: dict[str, str] | None = None) -> None:
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout_ms": 5000,
        "validate_only": False,
    }
    result = w.call(ApiKey.CREATE_TOPICS, 5, body)["topics"][0]
    assert result["error_code"] == 0, result


@pytest.fixture
def wire(rill_broker):
    w = Wire(rill_broker.bootstrap_servers)
    yield w
    w.close()


def test_api_versions_table_and_too_new_version(wire: Wire) -> None:
    table = {
        e["api_key"]: (e["min_version"], e["max_version"])
        for e in wire.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "wire", "client_software_version": "1"})[
            "api_keys"
        ]
    }
    for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.INIT_PRODUCER_ID):
        assert key in table
    for key, (lo, hi) in table.items():
        assert MESSAGES[key].min_version <= lo <= hi <= MESSAGES[key].max_version
    # ApiVersions v99 (header v2): answered with UNSUPPORTED_VERSION and the table, in the v0 body format.
    header = struct.pack(">hhi", ApiKey.API_VERSIONS, 99, 4242) + struct.pack(">h", 4) + b"wire" + b"\x00"
    frame = header + b"\x00\x00\x00"
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    corr, body = decode_response(ApiKey.API_VERSIONS, 0, wire.read_frame())
    assert corr == 4242
    assert body["error_code"] == ErrorCode.UNSUPPORTED_VERSION
    assert {e["api_key"] for e in body["api_keys"]} == set(table)


def test_unknown_api_closes_only_that_connection(rill_broker, wire: Wire) -> None:
    other = Wire(rill_broker.bootstrap_servers)
    frame = struct.pack(">hhi", 9999, 0, 1) + struct.pack(">h", -1)
    wire.send_raw(struct.pack(">i", len(frame)) + frame)
    assert wire.is_closed_by_peer()
    assert other.call(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False})["brokers"]
    other.close()


def test_a_client_repeating_an_unsupported_version_gets_closed_without_flooding_the_log(
    rill_broker, caplog: pytest.LogCaptureFixture
) -> None:
    """A client stuck on an old Fetch version (kafka-python told api_version=0.10.2 sends v3) reconnects and
    repeats it as fast as it can. Each connection is closed, as Kafka closes it; the log gets one line, not a
    traceback per connection."""
    frame = struct.pack(">hhi", ApiKey.FETCH, 3, 1) + struct.pack(">h", -1) + bytes(20)
    with caplog.at_level("DEBUG", logger="rill.network"):
        for _ in range(50):
            w = Wire(rill_broker.bootstrap_servers)
            w.send_raw(struct.pack(">i", len(frame)) + frame)
            assert w.is_closed_by_peer()
            w.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and sum("FETCH v3" in r.getMessage() for r in caplog.records) < 50:
            time.sleep(0.05)
    closes = [r for r in caplog.records if "FETCH v3; supported v4" in r.getMessage()]
    assert len(closes) == 50
    assert [r.levelname for r in closes].count("INFO") == 1
    assert all(r.exc_info is None and r.levelname in ("INFO", "DEBUG") for r in closes)


def test_acks_zero_sends_no_response_and_order_is_kept(wire: Wire) -> None:
    _create(wire, "acks0")
    batch = build_batch(_records(3))
    body = {
        "transactional_id": None,
        "acks": 0,
        "timeout_ms": 1000,
        "topic_data": [{"name": "acks0", "partition_data": [{"index": 0, "records": batch}]}],
    }
    from rill.protocol import encode_request

    wire.send_raw(encode_request(ApiKey.PRODUCE, 9, 100, "wire", body))
    # The next response on this connection belongs to the next request: acks=0 produced nothing.
    part = _fetch(wire, "acks0", 0)
    assert part["high_watermark"] == 3


def test_idempotent_sequences_duplicates_gaps_and_fencing(wire: Wire) -> None:
    _create(wire, "idem")
    init = wire.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
    )
    assert init["error_code"] == 0
    pid = init["producer_id"]
    b0 = build_batch(_records(2), producer_id=pid, producer_epoch=0, base_sequence=0)
    first = _produce(wire, "idem", b0)
    assert (first["error_code"], first["base_offset"]) == (0, 0)
    again = _produce(wire, "idem", b0)  # a retry of the same batch: success with the original offset
    assert (again["error_code"], again["base_offset"]) == (0, 0)
    gap = _produce(wire, "idem", build_batch(_records(1), producer_id=pid, producer_epoch=0, base_sequence=7))
    assert gap["error_code"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    nxt = _produce(wire, "idem", build_batch(_records(1), producer_id=pid, producer_epoch=0, base_sequence=2))
    assert (nxt["error_code"], nxt["base_offset"]) == (0, 2)
    bumped = _produce(wire, "idem", build_batch(_records(1), producer_id=pid, producer_epoch=1, base_sequence=0))
    assert bumped["error_code"] == 0
    fenced = _produce(wire, "idem", build_batch(_records(1), producer_id=pid, producer_epoch=0, base_sequence=3))
    assert fenced["error_code"] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert _fetch(wire, "idem", 0)["high_watermark"] == 4
    second = wire.call(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1},
    )
    assert second["producer_id"] != pid


def test_corrupt_crc_is_refused_and_broker_goes_on(wire: Wire) -> None:
    _create(wire, "crc")
    batch = bytearray(build_batch(_records(3)))
    batch[-1] ^= 0xFF
    assert _produce(wire, "crc", bytes(batch))["error_code"] == ErrorCode.CORRUPT_MESSAGE
    garbage = _produce(wire, "crc", b"\x00" * 10)
    assert garbage["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert _produce(wire, "crc", build_batch(_records(3)))["error_code"] == 0
    assert _fetch(wire, "crc", 0)["high_watermark"] == 3


def test_malformed_records_behind_a_good_crc_are_refused(wire: Wire) -> None:
    _create(wire, "records")
    batch = bytearray(build_batch(_records(3)))
    batch[61 + 4] = 0x7E  # record 0's key length: 63 bytes, past the end of its record
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    for version in (3, 9):
        resp = _produce(wire, "records", bytes(batch), version=version)
        assert resp["error_code"] == ErrorCode.INVALID_RECORD
    assert "record 0: fields run past" in resp["error_message"]
    assert _produce(wire, "records", build_batch(_records(3)))["error_code"] == 0
    fetched = _fetch(wire, "records", 0)
    assert fetched["high_watermark"] == 3
    assert [r.value for r in decode_batch_records(fetched["records"])] == [b"v0", b"v1", b"v2"]


def test_a_refused_record_is_named_in_record_errors(wire: Wire) -> None:
    """A batch refused for one of its records names it in the Produce response's RecordErrors (v8+),
    by its index in the batch, as Kafka does (KIP-467); older versions carry only the error code."""
    _create(wire, "named-compact", {"cleanup.policy": "compact"})
    records = _records(3)
    records[1] = Record(0, records[1].timestamp, None, b"no key", [])
    resp = _produce(wire, "named-compact", build_batch(records))
    assert resp["error_code"] == ErrorCode.INVALID_RECORD
    assert [e["batch_index"] for e in resp["record_errors"]] == [1]
    assert "no key" in resp["record_errors"][0]["batch_index_error_message"]
    assert "record 1 of batch 0" in resp["error_message"]
    assert _produce(wire, "named-compact", build_batch(records), version=7)["error_code"] == ErrorCode.INVALID_RECORD

    _create(wire, "named-bounded", {"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    late = [Record(0, now + i * 3_600_000, None, b"v", []) for i in range(3)]  # records 1 and 2 are too new
    resp = _produce(wire, "named-bounded", build_batch(late, compression=4))
    assert resp["error_code"] == ErrorCode.INVALID_TIMESTAMP
    assert [e["batch_index"] for e in resp["record_errors"]] == [1, 2]
    assert f"CreateTime {now + 3_600_000}" in resp["record_errors"][0]["batch_index_error_message"]
    # A batch that is taken names no record; nothing of the refused batches was written.
    assert _produce(wire, "named-bounded", build_batch(late[:1]))["record_errors"] == []
    assert [r.offset for r in decode_batch_records(bytes(_fetch(wire, "named-bounded", 0)["records"]))] == [0]


def test_log_append_time_and_recompression(wire: Wire) -> None:
    _create(wire, "lat", {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    resp = _produce(wire, "lat", build_batch(_records(2)))
    assert resp["log_append_time_ms"] >= before
    records = bytes(_fetch(wire, "lat", 0)["records"])
    header = parse_header(records)
    assert header.timestamp_type == 1 and header.max_timestamp == resp["log_append_time_ms"]
    # A producer may not mark its own batch LogAppendTime (on either kind of topic).
    marked = bytearray(build_batch(_records(2)))
    set_log_append_time(marked, 0, before)
    for topic in ("lat", "create-time"):
        if topic != "lat":
            _create(wire, topic)
        refused = _produce(wire, topic, bytes(marked))
        assert refused["error_code"] == ErrorCode.INVALID_TIMESTAMP and "LogAppendTime" in refused["error_message"]
    assert _fetch(wire, "lat", 0)["high_watermark"] == 2

    _create(wire, "zstd-topic", {"compression.type": "zstd"})
    assert _produce(wire, "zstd-topic", build_batch(_records(50)))["error_code"] == 0
    stored = bytes(_fetch(wire, "zstd-topic", 0)["records"])
    assert parse_header(stored).compression == 4
    assert [r.value for r in decode_batch_records(stored)] == [r.value for r in _records(50)]


def test_recompression_never_launders_a_corrupt_batch(wire: Wire) -> None:
    """The checksum is checked before the broker recompresses for the topic's compression.type;
    recompressing first would stamp a fresh, valid CRC on corrupt data."""
    _create(wire, "recompressed", {"compression.type": "lz4"})
    for codec in (0, 4):  # plain, and zstd: both are rewritten as lz4 when good
        batch = bytearray(build_batch(_records(3), compression=codec))
        batch[-1] ^= 0xFF
        assert _produce(wire, "recompressed", bytes(batch))["error_code"] == ErrorCode.CORRUPT_MESSAGE
    assert _produce(wire, "recompressed", build_batch(_records(3), compression=4))["error_code"] == 0
    stored = bytes(_fetch(wire, "recompressed", 0)["records"])
    assert parse_header(stored).compression == 3
    assert [r.value for r in decode_batch_records(stored)] == [b"v0", b"v1", b"v2"]


def test_recompression_refuses_a_decompression_bomb(rill_broker, wire: Wire) -> None:
    """A small zstd batch whose records would decompress to 100 MiB, sent to a topic that
    recompresses to lz4: refused past 64 MiB (the floor of what the broker decompresses), and the
    broker goes on."""
    _create(wire, "bomb", {"compression.type": "lz4"})
    cctx = zstandard.ZstdCompressor(level=1).compressobj()
    body = bytearray()
    zeros = bytes(1 << 20)
    for _ in range(100):
        body += cctx.compress(zeros)
    body += cctx.flush()
    batch = bytearray(build_batch(_records(1)))[:61] + body
    struct.pack_into(">i", batch, 8, len(batch) - 12)  # batchLength
    struct.pack_into(">h", batch, 21, 4)  # zstd
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    assert len(batch) < 1 << 20
    resp = _produce(wire, "bomb", bytes(batch))
    assert resp["error_code"] == ErrorCode.MESSAGE_TOO_LARGE, resp
    assert "compression.type" in resp["error_message"]
    assert _produce(wire, "bomb", build_batch(_records(3)))["error_code"] == 0


def test_recompression_uses_the_topic_compression_level(wire: Wire) -> None:
    """compression.zstd.level (and its kin) set the level the broker recompresses at."""
    words = [f"w{i * 7919 % 1000:03d}" for i in range(600)]
    records = [
        Record(0, 1_700_000_000_000 + i, None, " ".join(words[(i * 13 + j) % 600] for j in range(300)).encode(), [])
        for i in range(40)
    ]
    sizes = {}
    for topic, level in (("zstd-default", None), ("zstd-fast", "1"), ("zstd-19", "19")):
        configs = {"compression.type": "zstd"}
        if level is not None:
            configs["compression.zstd.level"] = level
        _create(wire, topic, configs)
        assert _produce(wire, topic, build_batch(records))["error_code"] == 0
        stored = bytes(_fetch(wire, topic, 0)["records"])
        assert parse_header(stored).compression == 4
        assert [r.value for r in decode_batch_records(stored)] == [r.value for r in records]
        sizes[topic] = len(stored)
    assert sizes["zstd-19"] < sizes["zstd-default"] < sizes["zstd-fast"], sizes


def test_fetch_long_poll_is_woken_by_an_append(rill_broker, wire: Wire) -> None:
    _create(wire, "poll")
    started = time.monotonic()
    empty = _fetch(wire, "poll", 0, max_wait_ms=300, min_bytes=1)
    waited = time.monotonic() - started
    assert 0.25 <= waited < 2.0 and len(empty["records"] or b"") == 0

    def produce_later() -> None:
        time.sleep(0.3)
        w2 = Wire(rill_broker.bootstrap_servers)
        _produce(w2, "poll", build_batch(_records(1)))
        w2.close()

    t = threading.Thread(target=produce_later)
    t.start()
    started = time.monotonic()
    part = _fetch(wire, "poll", 0, max_wait_ms=10_000, min_bytes=1)
    waited = time.monotonic() - started
    t.join()
    assert part["high_watermark"] == 1 and len(part["records"]) > 0
    assert waited < 3.0, f"the append did not wake the fetch ({waited:.2f} s)"


def test_fetch_out_of_range_and_unknown_topic(wire: Wire) -> None:
    _create(wire, "range")
    _produce(wire, "range", build_batch(_records(5)))
    assert _fetch(wire, "range", 50)["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert _fetch(wire, "nope", 0)["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.rill_broker_config(**{"fetch.max.bytes": "1024"})
def test_broker_fetch_max_bytes_caps_a_consumer_fetch(wire: Wire) -> None:
    _create(wire, "capped")
    for i in range(5):
        _produce(wire, "capped", build_batch(_records(40, start=40 * i)))
    batch_size = len(build_batch(_records(40)))
    assert 1024 // 2 < batch_size <= 1024  # one batch fits under the cap, two do not
    got = _fetch(wire, "capped", 0)  # asks for 1 MiB
    assert len(got["records"]) == batch_size
    assert [r.offset for r in decode_batch_records(got["records"])] == list(range(40))


def test_metadata_auto_creation_follows_the_request_flag(wire: Wire) -> None:
    off = wire.call(ApiKey.METADATA, 9, {"topics": [{"name": "auto-no"}], "allow_auto_topic_creation": False})
    assert off["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    on = wire.call(ApiKey.METADATA, 9, {"topics": [{"name": "auto-yes"}], "allow_auto_topic_creation": True})
    assert on["topics"][0]["error_code"] == 0 and len(on["topics"][0]["partitions"]) == 1
    bad = wire.call(ApiKey.METADATA, 9, {"topics": [{"name": "bad name!"}], "allow_auto_topic_creation": True})
    assert bad["topics"][0]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION


@pytest.mark.rill_broker_config(**{"auto.create.topics.enable": "false", "num.partitions": "3"})
def test_auto_creation_disabled_by_broker_config(wire: Wire) -> None:
    resp = wire.call(ApiKey.METADATA, 9, {"topics": [{"name": "auto-x"}], "allow_auto_topic_creation": True})
    assert resp["topics"][0]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    _create_default = {
        "topics": [{"name": "dflt", "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}],
        "timeout_ms": 5000,
        "validate_only": False,
    }
    result = wire.call(ApiKey.CREATE_TOPICS, 5, _create_default)["topics"][0]
    assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 3, 1)


def test_config_validation_and_synonyms(wire: Wire) -> None:
    _create(wire, "cfg", {"retention.ms": "1000"})
    bad = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "cfg",
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "soon"}],
            }
        ],
        "validate_only": False,
    }
    assert wire.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, bad)["responses"][0]["error_code"] == ErrorCode.INVALID_CONFIG
    unknown = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "cfg",
                "configs": [{"name": "no.such.config", "config_operation": 0, "value": "1"}],
            }
        ],
        "validate_only": False,
    }
    assert (
        wire.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, unknown)["responses"][0]["error_code"]
        == ErrorCode.INVALID_CONFIG
    )
    good = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "cfg",
                "configs": [{"name": "segment.bytes", "config_operation": 0, "value": "1048576"}],
            }
        ],
        "validate_only": False,
    }
    assert wire.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, good)["responses"][0]["error_code"] == 0
    described = wire.call(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [{"resource_type": 2, "resource_name": "cfg", "configuration_keys": None}],
            "include_synonyms": True,
            "include_documentation": False,
        },
    )
    entries = {c["name"]: c for c in described["results"][0]["configs"]}
    assert entries["retention.ms"]["value"] == "1000" and entries["retention.ms"]["config_source"] == 1
    assert entries["segment.bytes"]["value"] == "1048576"
    assert entries["cleanup.policy"]["config_source"] == 5  # default
    synonyms = [s["name"] for s in entries["retention.ms"]["synonyms"]]
    assert synonyms == ["retention.ms"]  # as Kafka: no broker synonym before log.retention.ms, which is not set


def test_a_topic_named_twice_in_one_admin_request_is_refused_once(wire: Wire) -> None:
    """As Kafka's controller does: a topic a CreateTopics, DeleteTopics or CreatePartitions request names
    more than once is left alone and answered once, with INVALID_REQUEST; the other topics go ahead (a
    second answer for one name breaks clients: librdkafka fails the whole response)."""

    def new(name: str) -> dict:
        return {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}

    body = {"topics": [new("twice"), new("once"), new("twice")], "timeout_ms": 5000, "validate_only": False}
    got = wire.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
    assert sorted((t["name"], t["error_code"]) for t in got) == [
        ("once", 0),
        ("twice", ErrorCode.INVALID_REQUEST),
    ]
    assert next(t for t in got if t["name"] == "twice")["error_message"] == "Duplicate topic name."
    def partitions() -> dict[str, int]:
        body = {"topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        return {t["name"]: len(t["partitions"]) for t in wire.call(ApiKey.METADATA, 9, body)["topics"]}

    assert "twice" not in partitions() and partitions()["once"] == 1

    body = {"topics": [{"name": "once", "count": 3}, {"name": "once", "count": 4}], "timeout_ms": 5000,
            "validate_only": False}
    got = wire.call(ApiKey.CREATE_PARTITIONS, 2, body)["results"]
    assert [(r["name"], r["error_code"]) for r in got] == [("once", ErrorCode.INVALID_REQUEST)]
    assert partitions()["once"] == 1

    got = wire.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["once", "once"], "timeout_ms": 5000})["responses"]
    assert [(r["name"], r["error_code"]) for r in got] == [("once", ErrorCode.INVALID_REQUEST)]
    got = wire.call(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["once"], "timeout_ms": 5000})["responses"]
    assert [(r["name"], r["error_code"]) for r in got] == [("once", 0)]  # the refused delete left it there


def test_names_that_differ_only_in_dot_and_underscore_collide(wire: Wire) -> None:
    """Kafka refuses a topic whose name reads like an existing one's once '.' and '_' are made the same
    (metric names do that): INVALID_TOPIC_EXCEPTION, in CreateTopics (validate_only too, and within one
    request) and in auto-creation through Metadata."""

    def new(name: str) -> dict:
        return {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}

    def create(*names: str, validate_only: bool = False) -> list[tuple[str, int, str | None]]:
        body = {"topics": [new(n) for n in names], "timeout_ms": 5000, "validate_only": validate_only}
        got = wire.call(ApiKey.CREATE_TOPICS, 5, body)["topics"]
        return [(t["name"], t["error_code"], t["error_message"]) for t in got]

    assert create("metrics.cpu")[0][1] == 0
    message = "Topic 'metrics_cpu' collides with existing topic: metrics.cpu"
    assert create("metrics_cpu", validate_only=True) == [("metrics_cpu", ErrorCode.INVALID_TOPIC_EXCEPTION, message)]
    assert [(n, c) for n, c, _ in create("a.b", "a_b", "a-b")] == [
        ("a.b", 0), ("a_b", ErrorCode.INVALID_TOPIC_EXCEPTION), ("a-b", 0)
    ]
    body = {"topics": [{"name": "metrics_cpu"}], "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
    (topic,) = wire.call(ApiKey.METADATA, 9, body)["topics"]
    assert topic["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION


def _alter(wire: Wire, rtype: int, name: str, *ops: tuple[str, int, str | None]) -> list[tuple[int, str | None]]:
    body = {
        "resources": [
            {"resource_type": rtype, "resource_name": name,
             "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
        ],
        "validate_only": False,
    }  # fmt: skip
    got = wire.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    return [(r["error_code"], r["error_message"]) for r in got]


def _described(wire: Wire, rtype: int, name: str, key: str | None = None) -> dict[str, tuple]:
    body = {
        "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": [key] if key else None}],
        "include_synonyms": True,
        "include_documentation": False,
    }
    (result,) = wire.call(ApiKey.DESCRIBE_CONFIGS, 4, body)["results"]
    assert result["error_code"] == 0, result
    return {
        c["name"]: (c["value"], c["config_source"], [(s["name"], s["value"], s["source"]) for s in c["synonyms"]])
        for c in result["configs"]
    }


def test_cluster_wide_broker_defaults_are_a_layer_below_the_brokers_own(wire: Wire) -> None:
    """Dynamic broker configs on resource "" are the cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG),
    under each broker's own (DYNAMIC_BROKER_CONFIG, resource "<id>"): deleting a broker's own value falls
    back to the default, not to the static config; describing "" lists only the defaults that are set."""
    broker, topic_type, set_, delete = 4, 2, 0, 1
    dynamic, dynamic_default, default = 2, 3, 5
    assert _described(wire, broker, "") == {}
    assert _alter(wire, broker, "", ("log.retention.ms", set_, "123456")) == [(0, None)]
    (only,) = _described(wire, broker, "").items()
    assert only[0] == "log.retention.ms" and only[1][:2] == ("123456", dynamic_default)
    assert only[1][2][0] == ("log.retention.ms", "123456", dynamic_default)  # then the defaults of its synonyms
    assert _described(wire, broker, "0", "log.retention.ms")["log.retention.ms"][:2] == ("123456", dynamic_default)
    assert _alter(wire, broker, "0", ("log.retention.ms", set_, "999")) == [(0, None)]
    value, source, synonyms = _described(wire, broker, "0", "log.retention.ms")["log.retention.ms"]
    assert (value, source) == ("999", dynamic)
    assert synonyms[:2] == [("log.retention.ms", "999", dynamic), ("log.retention.ms", "123456", dynamic_default)]
    _create(wire, "layered")
    assert _described(wire, topic_type, "layered", "retention.ms")["retention.ms"][:2] == ("999", dynamic)
    assert _alter(wire, broker, "0", ("log.retention.ms", delete, None)) == [(0, None)]
    assert _described(wire, broker, "0", "log.retention.ms")["log.retention.ms"][:2] == ("123456", dynamic_default)
    assert _described(wire, topic_type, "layered", "retention.ms")["retention.ms"][:2] == ("123456", dynamic_default)
    assert _alter(wire, broker, "", ("log.retention.ms", delete, None)) == [(0, None)]
    assert _described(wire, broker, "0", "log.retention.ms")["log.retention.ms"][1] == default


def test_a_resource_or_config_named_twice_in_one_alter_is_refused(wire: Wire) -> None:
    _create(wire, "twice-configured")
    topic_type, set_ = 2, 0
    assert _alter(wire, topic_type, "twice-configured", ("retention.ms", set_, "5"), ("retention.ms", set_, "6")) == [
        (ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys : retention.ms")
    ]
    resource = {"resource_type": topic_type, "resource_name": "twice-configured",
                "configs": [{"name": "retention.ms", "config_operation": set_, "value": "7"}]}  # fmt: skip
    body = {"resources": [resource, resource], "validate_only": False}
    got = wire.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"]
    assert [(r["resource_name"], r["error_code"], r["error_message"]) for r in got] == [
        ("twice-configured", ErrorCode.INVALID_REQUEST, "Duplicate resource.")
    ]
    # Neither request changed the topic: its retention.ms is still the default, not an override.
    assert _described(wire, topic_type, "twice-configured", "retention.ms")["retention.ms"][:2] == ("604800000", 5)


def test_create_partitions_takes_a_valid_manual_assignment(wire: Wire) -> None:
    """CreatePartitions with replica assignments, as Kafka checks them: one list per new partition, of the
    topic's replication factor, of distinct known brokers (validate_only checks the same and changes nothing)."""
    _create(wire, "assigned")

    def grow(count: int, assignments: list[list[int]], validate_only: bool = False) -> tuple[int, str | None]:
        body = {"topics": [{"name": "assigned", "count": count,
                            "assignments": [{"broker_ids": a} for a in assignments]}],
                "timeout_ms": 5000, "validate_only": validate_only}  # fmt: skip
        (r,) = wire.call(ApiKey.CREATE_PARTITIONS, 2, body)["results"]
        return r["error_code"], r["error_message"]

    bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert grow(3, [[0]])[0] == bad  # two new partitions, one list
    assert grow(2, [[7]])[0] == bad  # no broker 7
    assert grow(2, [[0, 0]])[0] == bad  # twice the same broker
    assert grow(2, [[0]], validate_only=True) == (0, None)
    assert grow(3, [[0], [0]]) == (0, None)
    body = {"topics": [{"name": "assigned"}], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
    (topic,) = wire.call(ApiKey.METADATA, 9, body)["topics"]
    assert [(p["partition_index"], p["replica_nodes"]) for p in topic["partitions"]] == [(0, [0]), (1, [0]), (2, [0])]


def test_logger_levels_are_read_and_changed_through_the_broker_logger_resource(wire: Wire) -> None:
    """Kafka's BROKER_LOGGER resource (what ``kafka-configs --entity-type broker-loggers`` uses): every logger
    with its level, changed at run time with IncrementalAlterConfigs SET and DELETE; bad levels, unknown
    loggers, removing the root level and APPEND are refused, and a refused request changes nothing."""
    import logging

    broker_logger, set_, delete, append = 8, 0, 1, 2
    network = logging.getLogger("rill.network")
    before = network.level
    try:
        levels = _described(wire, broker_logger, "0")
        assert "root" in levels and "rill.network" in levels
        assert all(source == 6 for _, source, _ in levels.values())  # DYNAMIC_BROKER_LOGGER_CONFIG
        assert _alter(wire, broker_logger, "0", ("rill.network", set_, "TRACE")) == [(0, None)]
        assert network.level == 5 and _described(wire, broker_logger, "0")["rill.network"][0] == "TRACE"
        refused = [
            _alter(wire, broker_logger, "0", ("rill.network", set_, "WARN"), ("rill.network.nope", set_, "INFO")),
            _alter(wire, broker_logger, "0", ("rill.network", set_, "LOUD")),
            _alter(wire, broker_logger, "0", ("root", delete, None)),
            _alter(wire, broker_logger, "0", ("rill.network", append, "INFO")),
            _alter(wire, broker_logger, "", ("rill.network", set_, "INFO")),
        ]
        assert [code for ((code, _),) in refused] == [
            ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST,
            ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
        ]  # fmt: skip
        assert refused[0][0][1] == "Logger rill.network.nope does not exist!"
        assert network.level == 5  # the first change of the refused request was not made either
        assert _alter(wire, broker_logger, "0", ("rill.network", delete, None)) == [(0, None)]
        assert network.level == logging.NOTSET
    finally:
        network.setLevel(before)


def test_metadata_by_topic_id_with_an_empty_name(wire: Wire) -> None:
    """The Java client asks for topics by id with the name "" rather than null (describeTopics of a
    TopicCollection of ids); the broker looks those up by id, as Kafka does. CreateTopics with validate_only
    answers the id the topic would have had, as Kafka's controller does, not the zero id."""
    import uuid

    _create(wire, "by-id")
    body = {"topics": [{"name": "by-id"}], "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    topic_id = wire.call(ApiKey.METADATA, 12, body)["topics"][0]["topic_id"]
    unknown = uuid.uuid4()
    body["topics"] = [{"name": "", "topic_id": topic_id}, {"name": "", "topic_id": unknown}]
    got = wire.call(ApiKey.METADATA, 12, body)["topics"]
    assert [(t["name"], t["topic_id"], t["error_code"]) for t in got] == [
        ("by-id", topic_id, 0),
        (None, unknown, ErrorCode.UNKNOWN_TOPIC_ID),
    ]
    new = {"name": "would-be", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    body = {"topics": [new], "timeout_ms": 5000, "validate_only": True}
    (result,) = wire.call(ApiKey.CREATE_TOPICS, 7, body)["topics"]
    assert result["error_code"] == 0 and result["topic_id"] != uuid.UUID(int=0)


def test_a_full_disk_refuses_the_offsets_topic_cleanly(tmpfs) -> None:
    """With no space left for ``__consumer_offsets`` (here, its metadata), FindCoordinator answers the retriable
    COORDINATOR_NOT_AVAILABLE with the reason, on a connection that stays open, instead of a handler failure
    that closed it; the refused topic is not left half made."""
    import rill.testing

    with rill.testing.broker(data_dir=tmpfs / "data") as b:
        w = Wire(b.bootstrap_servers)
        filler = tmpfs / "filler"
        with open(filler, "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(bytes(64 * 1024))
        resp = w.call(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert resp["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "cannot create __consumer_offsets" in resp["error_message"]
        body = {"topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}  # fmt: skip
        assert [t["name"] for t in w.call(ApiKey.METADATA, 9, body)["topics"]] == []
        filler.unlink()
        assert w.call(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})["error_code"] == 0
        w.close()
