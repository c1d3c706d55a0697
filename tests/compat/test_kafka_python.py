"""kafka-python 3.0.12 (idempotent producer on by default) against a Rill broker."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions, NewTopic
from kafka.errors import TopicAlreadyExistsError
from tests.compat._data import CODECS, N_RECORDS, make_records


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_every_codec(rill_broker, codec: str) -> None:
    bootstrap = rill_broker.bootstrap_servers
    topic = f"kp-{codec}"
    records = make_records(seed="kp" + codec)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        acks="all",
    )
    futures = [
        producer.send(
            topic, value=r.value, key=r.key, headers=r.headers, partition=0, timestamp_ms=r.timestamp
        )
        for r in records
    ]
    producer.flush(60)
    offsets = [f.get(timeout=30).offset for f in futures]
    assert offsets == list(range(N_RECORDS))
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = []
    deadline = time.monotonic() + 60
    while len(got) < N_RECORDS and time.monotonic() < deadline:
        for msgs in consumer.poll(timeout_ms=1000, max_records=5000).values():
            got.extend(msgs)
    consumer.close()
    assert len(got) == N_RECORDS
    for i, (m, r) in enumerate(zip(got, records, strict=True)):
        assert (m.offset, m.key, m.value, m.timestamp) == (i, r.key, r.value, r.timestamp)
        assert list(m.headers) == r.headers


def test_admin_client(rill_broker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=rill_broker.bootstrap_servers)
    admin.create_topics([NewTopic("kp-admin", 2, 1, topic_configs={"cleanup.policy": "delete"})])
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kp-admin", 2, 1)])
    admin.create_partitions({"kp-admin": NewPartitions(4)})
    described = admin.describe_topics(["kp-admin"])
    assert len(described[0]["partitions"]) == 4
    assert "kp-admin" in admin.list_topics()
    admin.delete_topics(["kp-admin"])
    assert "kp-admin" not in admin.list_topics()
    admin.close()
