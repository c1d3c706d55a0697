"""A topic whose deletion the broker did not finish before it stopped (a crash while thousands of partition
directories were being renamed, before the group coordinator tombstoned the offsets committed for it).

The state such a crash leaves is made by hand here: the metadata without the topic, its partition directory
and its committed offsets still there. After the restart the old directory is set aside as stray (kept, not
loaded), the offsets are gone, and the topic created again under the same name starts empty: a group reads
its new records from offset 0 (the old directory used to be reused as the new topic's log, old records and
all, and the group started from its old committed offset, skipping the new ones)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

import rill.testing
from rill.metadata.journal import JOURNAL_FILE

pytestmark = pytest.mark.timeout(120)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(10) == 0


def _consume_all(consumer: Consumer, n: int) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.value()))
    return got


def test_a_topic_deleted_while_down_leaves_no_log_or_offsets_behind(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with rill.testing.broker(data_dir=data, num_partitions=1) as b:
        bs = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("old", 1)])["old"].result(10)
        _produce(bs, "old", [b"a", b"b", b"c"])
        consumer = Consumer({"bootstrap.servers": bs, "group.id": "g", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition("old", 0, 3)], asynchronous=False)
        consumer.close()

        b.stop()
        # The metadata without the topic: its deletion is the journal's last change.
        journal = data / "logs" / JOURNAL_FILE
        last = max(json.loads(line)["offset"] for line in journal.read_text().splitlines())
        with journal.open("a") as f:
            f.write(json.dumps({"offset": last + 1, "type": "delete_topic", "name": "old"}) + "\n")
        b.start()

        stray = [p.name for p in (data / "logs").iterdir() if p.name.endswith("-stray")]
        assert len(stray) == 1 and stray[0].startswith("old-0."), stray
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("old", 1)])["old"].result(10)
        new = [f"new-{i}".encode() for i in range(5)]  # more than the old committed offset
        _produce(bs, "old", new)
        consumer = Consumer({"bootstrap.servers": bs, "group.id": "g", "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["old"])
            assert _consume_all(consumer, 5) == list(enumerate(new))
        finally:
            consumer.close()
