"""Broker and topic configs: parsing, validation, synonyms, describe, and server.properties files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    TOPIC_SYNONYMS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    EndPoint,
    describe_broker_configs,
    describe_topic_configs,
    ensure_cluster_id,
    load_properties,
    parse_properties,
    topic_config_defaults,
    validate_broker_dynamic_configs,
    validate_topic_configs,
)
from rill.errors import ErrorCode, KafkaError


def test_embedded_defaults() -> None:
    b = BrokerConfig.from_properties({})
    assert b.listeners == (EndPoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert b.listener_address == ("127.0.0.1", 9092)
    assert b.advertised_address is None
    assert b.log_dirs == ["./rill-data"]
    assert b.node_id == 0
    expected = {
        "num.partitions": 1,
        "default.replication.factor": 1,
        "auto.create.topics.enable": True,
        "message.max.bytes": 1048588,
        "socket.request.max.bytes": 104857600,
        "connections.max.idle.ms": 600000,
        "log.retention.hours": 168,
        "offsets.topic.num.partitions": 50,
        "offsets.retention.minutes": 10080,
        "group.initial.rebalance.delay.ms": 3000,
        "group.min.session.timeout.ms": 6000,
        "group.max.session.timeout.ms": 1800000,
        "log.cleanup.policy": ["delete"],
        "compression.type": "producer",
        "metrics.port": 0,
        "cluster.id": None,
        "log.retention.ms": None,
    }
    for name, value in expected.items():
        assert b.get(name) == value, name
    assert b.log_retention_ms == 7 * 24 * 3600 * 1000
    assert b.log_roll_ms == 7 * 24 * 3600 * 1000
    with pytest.raises(KeyError):
        b.get("no.such.config")


def test_typed_values_and_overrides() -> None:
    b = BrokerConfig.from_properties(
        {
            "broker.id": "3",
            "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://[::1]:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "advertised.listeners": "PLAINTEXT://broker.example:19092",
            "log.dirs": "/a, /b",
            "auto.create.topics.enable": "FALSE",
            "log.retention.minutes": "5",
            "num.io.threads": "16",
            "transaction.state.log.min.isr": "1",
            "some.unknown.thing": "x",
        }
    )
    assert b.node_id == 3 and b.get("broker.id") == 3
    assert [str(e) for e in b.listeners] == ["PLAINTEXT://127.0.0.1:0", "INTERNAL://[::1]:9093"]
    assert b.advertised_address == ("broker.example", 19092)
    assert b.log_dirs == ["/a", "/b"]
    assert b.get("auto.create.topics.enable") is False
    assert b.log_retention_ms == 300000
    assert b.unknown == ("some.unknown.thing",)
    c = b.with_overrides({"log.retention.ms": "1000"}, num_partitions="4")
    assert c.log_retention_ms == 1000 and c.get("num.partitions") == 4 and c.node_id == 3
    assert b.get("num.partitions") == 1
    assert "some.unknown.thing" not in b.non_default()  # not set: nothing reads it


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"num.partitions": "0"}, "num.partitions"),
        ({"num.partitions": "many"}, "num.partitions"),
        ({"message.max.bytes": str(2**31)}, "message.max.bytes"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
        ({"listeners": "127.0.0.1:9092"}, "listeners"),
        ({"listeners": "PLAINTEXT://127.0.0.1:70000"}, "listeners"),
        ({"listeners": "FOO://127.0.0.1:9093"}, "listeners"),  # no security protocol for FOO
        ({"compression.type": "brotli"}, "compression.type"),
        ({"log.message.timestamp.type": "WallTime"}, "log.message.timestamp.type"),
        ({"log.cleanup.policy": "delete,shred"}, "log.cleanup.policy"),
        ({"node.id": "1", "broker.id": "2"}, "node.id"),
        ({"log.cleaner.min.cleanable.ratio": "1.5"}, "log.cleaner.min.cleanable.ratio"),
        ({"group.min.session.timeout.ms": "9000", "group.max.session.timeout.ms": "8000"}, "session"),
        ({"group.consumer.session.timeout.ms": "1000"}, "group.consumer.session.timeout.ms"),  # < its min
        ({"group.consumer.heartbeat.interval.ms": "20000"}, "group.consumer.heartbeat.interval.ms"),  # > its max
        ({"group.consumer.heartbeat.interval.ms": "5000", "group.consumer.session.timeout.ms": "5000",
          "group.consumer.min.session.timeout.ms": "5000"}, "group.consumer.heartbeat.interval.ms"),
    ],
)
def test_bad_broker_values_name_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        BrokerConfig.from_properties(props)


def test_topic_defaults_follow_broker_synonyms() -> None:
    b = BrokerConfig.from_properties(
        {
            "log.retention.hours": "2",
            "log.segment.bytes": "1048576",
            "message.max.bytes": "5000000",
            "log.roll.ms": "1000",
            "log.flush.interval.ms": "50",
            "log.cleanup.policy": "compact,delete",
        }
    )
    d = topic_config_defaults(b)
    assert set(d) == set(TOPIC_CONFIGS.keys)
    assert d["retention.ms"] == str(2 * 3600 * 1000)
    assert d["segment.bytes"] == "1048576"
    assert d["max.message.bytes"] == "5000000"
    assert d["segment.ms"] == "1000"
    assert d["flush.ms"] == "50"
    assert d["cleanup.policy"] == "compact,delete"
    assert d["file.delete.delay.ms"] == "60000"
    assert d["compression.type"] == "producer"
    assert d["message.timestamp.type"] == "CreateTime"
    # A dynamic broker config wins over server.properties; the finest unit present wins within a source.
    d2 = topic_config_defaults(b, {"log.retention.ms": "1234"})
    assert d2["retention.ms"] == "1234"
    assert topic_config_defaults(b.with_overrides({"log.retention.minutes": "3"}))["retention.ms"] == "180000"
    assert topic_config_defaults(b.with_overrides({"log.retention.hours": "-1"}))["retention.ms"] == "-1"


def test_every_synonym_is_a_broker_config() -> None:
    for topic, synonyms in TOPIC_SYNONYMS.items():
        assert topic in TOPIC_CONFIGS
        for name, _ in synonyms:
            assert name in BROKER_CONFIGS, name


def test_validate_topic_configs() -> None:
    ok = validate_topic_configs(
        {
            "retention.ms": "-1",
            "cleanup.policy": "compact",
            "compression.type": "zstd",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.1",
        }
    )
    assert ok["retention.ms"] == -1 and ok["cleanup.policy"] == ["compact"]
    for bad in [
        {"retention.ms": "soon"},
        {"no.such": "1"},
        {"compression.type": "brotli"},
        {"message.timestamp.type": "Now"},
        {"cleanup.policy": "keep"},
        {"segment.bytes": "10"},
        {"max.message.bytes": "-5"},
        {"retention.ms": None},
    ]:
        with pytest.raises(KafkaError) as info:
            validate_topic_configs(bad)
        assert info.value.code == ErrorCode.INVALID_CONFIG
        assert next(iter(bad)) in str(info.value)


def test_validate_broker_dynamic_configs() -> None:
    assert validate_broker_dynamic_configs({"log.retention.ms": "100"}) == {"log.retention.ms": 100}
    for bad in [{"listeners": "PLAINTEXT://:1"}, {"nope": "1"}, {"message.max.bytes": "x"}]:
        with pytest.raises(KafkaError) as info:
            validate_broker_dynamic_configs(bad)
        assert info.value.code == ErrorCode.INVALID_CONFIG


def test_describe_topic_configs_sources_and_synonyms() -> None:
    b = BrokerConfig.from_properties({"log.retention.minutes": "5"})
    entries = {e.name: e for e in describe_topic_configs(b, {"segment.bytes": "2000000"})}
    assert set(entries) == set(TOPIC_CONFIGS.keys)
    seg = entries["segment.bytes"]
    assert (seg.value, seg.source, seg.config_type) == (
        "2000000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG,
        ConfigType.INT,
    )
    assert [(s.name, s.source) for s in seg.synonyms] == [
        ("segment.bytes", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG),
    ]
    ret = entries["retention.ms"]
    # As Kafka: the broker synonyms before the own broker name (log.retention.ms) are dropped, so none is
    # listed and the source is the default; the value is still the one in effect.
    assert (ret.value, ret.source, ret.synonyms) == ("300000", ConfigSource.DEFAULT_CONFIG, ())
    ms = {e.name: e for e in describe_topic_configs(b.with_overrides({"log.retention.ms": "7"}), {})}["retention.ms"]
    assert (ms.value, ms.source) == ("7", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in ms.synonyms] == [
        ("log.retention.ms", "7", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.minutes", "5", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    dyn = {
        e.name: e
        for e in describe_topic_configs(b, {}, {"log.retention.ms": "9"}, {"log.retention.hours": "1"})
    }
    assert [s.source for s in dyn["retention.ms"].synonyms] == [
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        ConfigSource.STATIC_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG,
    ]
    assert dyn["retention.ms"].value == "9"
    plain = entries["leader.replication.throttled.replicas"]
    assert plain.source == ConfigSource.DEFAULT_CONFIG and plain.is_default and plain.synonyms == ()
    assert not any(e.read_only for e in entries.values())


def test_describe_broker_configs() -> None:
    b = BrokerConfig.from_properties(
        {"log.retention.minutes": "5", "num.partitions": "3", "ssl.key.password": "s"}
    )
    entries = {e.name: e for e in describe_broker_configs(b, {"log.retention.ms": "77"})}
    assert set(entries) == set(BROKER_CONFIGS.keys)
    ms = entries["log.retention.ms"]
    assert (ms.value, ms.source, ms.read_only) == ("77", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert [s.name for s in ms.synonyms] == [
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ]
    hours = entries["log.retention.hours"]
    assert [(s.name, s.source) for s in hours.synonyms] == [
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG)
    ]
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["num.partitions"].read_only
    roll = entries["log.roll.ms"]
    assert roll.value is None and roll.source == ConfigSource.DEFAULT_CONFIG
    pw = entries["ssl.key.password"]
    assert pw.is_sensitive and pw.value is None and pw.config_type == ConfigType.PASSWORD
    assert all(s.value is None for s in pw.synonyms)
    assert entries["auto.create.topics.enable"].config_type == ConfigType.BOOLEAN
    assert entries["auto.create.topics.enable"].value == "true"


def test_properties_file(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "# a comment",
            "! another comment",
            "   ",
            "node.id=7",
            "listeners = PLAINTEXT://127.0.0.1:0",
            "log.dirs: /data/one,\\",
            "    /data/two",
            "num.partitions 4",
            "key\\=with\\:seps=v\\u00e9\\tx",
            "empty.value=",
            "log.retention.hours=24   ",
        ]
    )
    path = tmp_path / "server.properties"
    path.write_text(text, encoding="utf-8")
    props = load_properties(path)
    assert props == {
        "node.id": "7",
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": "/data/one,/data/two",
        "num.partitions": "4",
        "key=with:seps": "v\u00e9\tx",
        "empty.value": "",
        "log.retention.hours": "24   ",
    }
    b = BrokerConfig.from_properties(props)
    assert b.node_id == 7 and b.log_dirs == ["/data/one", "/data/two"] and b.log_retention_ms == 24 * 3600000


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9.]{0,15}", fullmatch=True),
        st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20),
        max_size=8,
    )
)
def test_properties_round_trip(props: dict[str, str]) -> None:
    def esc(s: str) -> str:
        out = s.replace("\\", "\\\\")
        if out.startswith(" "):
            out = "\\" + out
        return out

    text = "\n".join(f"{k}={esc(v)}" for k, v in props.items())
    assert parse_properties(text) == props


@given(st.sampled_from(sorted(BROKER_CONFIGS.keys)), st.text(max_size=12))
def test_any_broker_value_is_accepted_or_named(name: str, raw: str) -> None:
    try:
        BrokerConfig.from_properties({name: raw})
    except ConfigError as e:
        assert name.split(".")[0] in str(e) or "listener" in str(e) or "log.dir" in str(e)


def test_cluster_id() -> None:
    cid = ensure_cluster_id()
    assert len(cid) == 22 and cid != ensure_cluster_id()
    assert ensure_cluster_id("abc") == "abc"


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, ("0", ConfigSource.DEFAULT_CONFIG)),
        ({"node.id": "3"}, ("3", ConfigSource.STATIC_BROKER_CONFIG)),
        ({"broker.id": "4"}, ("4", ConfigSource.STATIC_BROKER_CONFIG)),
    ],
)
def test_node_id_and_broker_id_describe_as_one_value(props: dict[str, str], expected: tuple[str, object]) -> None:
    # Kafka copies whichever of the two was set into the other; DescribeConfigs shows the same id under both.
    entries = {e.name: e for e in describe_broker_configs(BrokerConfig.from_properties(props))}
    for name in ("node.id", "broker.id"):
        assert (entries[name].value, entries[name].source) == expected
        assert [(s.name, s.value, s.source) for s in entries[name].synonyms] == [(name, *expected)]


@pytest.mark.parametrize("name", ["log.dirs", "log.dir"])
@pytest.mark.parametrize("value", ["", " , "])
def test_an_empty_log_dir_setting_is_a_config_error(name: str, value: str) -> None:
    # It used to pass validation and fail later with "list index out of range".
    with pytest.raises(ConfigError, match=f"configuration {name}: no directory given"):
        BrokerConfig.from_properties({name: value})
