"""Batch read options as Spark's Kafka source takes them: subscriptions are sets."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.spark.test_read import produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _reader(spark: Any, bootstrap: str, **options: str) -> Any:
    reader = spark.read.format("rill").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_topics_and_partitions_named_twice_are_read_once(
    spark: Any, bootstrap: str, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, 40, partitions=2)
    for options in ({"subscribe": f"{topic},{topic}"}, {"assign": json.dumps({topic: [0, 0, 1]})}):
        rows = _reader(spark, bootstrap, **options).select("partition", "offset").collect()
        keys = sorted((r.partition, r.offset) for r in rows)
        assert keys == [(p, o) for p in (0, 1) for o in range(20)], options

