"""A task's read of one offset range against a real broker (no Spark): it reads until the range's end,
waiting for records that are not there yet, and a range the log cannot fill ends loudly (failOnDataLoss)
or, with failOnDataLoss=false, with what exists."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pyarrow as pa
import pytest

from rill.client import IdempotentProducer, KafkaClient
from rill.errors import KafkaError
from rill.spark.options import OffsetRange, SourceOptions
from rill.spark.reader import read_range

pytestmark = [pytest.mark.spark, pytest.mark.timeout(60)]


def _opts(bootstrap: str, topic: str, **extra: str) -> SourceOptions:
    return SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **extra})


def _send(client: KafkaClient, topic: str, values: range) -> None:
    with IdempotentProducer(client) as p:
        for i in values:
            p.send(topic, b"v%d" % i, None)
        p.flush()


def _offsets(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_read_waits_for_records_up_to_the_range_end(
    bootstrap: str, client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    _send(client, topic, range(10))
    # The range ends past what is there now; the rest arrives while the task already reads.
    later = threading.Timer(0.5, _send, (client, topic, range(10, 20)))
    later.start()
    try:
        t0 = time.monotonic()
        got = list(read_range(OffsetRange(topic, 0, 3, 20), _opts(bootstrap, topic), rows_per_batch=4))
    finally:
        later.join()
    assert _offsets(got) == list(range(3, 20))
    assert all(b.num_rows <= 4 for b in got)
    assert time.monotonic() - t0 < 30


def test_a_range_the_log_cannot_fill_fails_loudly(
    bootstrap: str, client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic()
    _send(client, topic, range(5))
    rng = OffsetRange(topic, 0, 0, 8)
    with pytest.raises(KafkaError, match="no records from 5 to 8"):
        list(read_range(rng, _opts(bootstrap, topic, **{"kafkaConsumer.pollTimeoutMs": "500"})))
    lenient = _opts(bootstrap, topic, failOnDataLoss="false", **{"kafkaConsumer.pollTimeoutMs": "500"})
    assert _offsets(list(read_range(rng, lenient))) == [0, 1, 2, 3, 4]
