"""DescribeTopicPartitions (KIP-966): pages of partitions with a cursor, exact requests over a real socket.
Kafka's Java admin client (3.8 and later) describes topics by name with it when the broker offers it:
tests/compat/test_java_client.py::test_admin_client runs that path."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.testing import TestBroker
from rill.testing import broker as broker_of

TOPICS = {"dtp-a": 3, "dtp-b": 2, "dtp-c": 1}


@pytest.fixture(scope="module")
def broker() -> Iterator[TestBroker]:
    with broker_of({"max.request.partition.size.limit": "5"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        for f in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
            f.result(30)
        yield b


@pytest.fixture
def wire(broker: TestBroker) -> Iterator[Wire]:
    w = Wire(broker.bootstrap_servers)
    yield w
    w.close()


def _describe(w: Wire, topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> dict[str, Any]:
    body = {
        "topics": [{"name": t} for t in topics],
        "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
    }
    return w.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, body)


def _pages(w: Wire, topics: list[str], limit: int) -> list[list[tuple[str, list[int]]]]:
    """Every page until no cursor comes back: per page, each topic with its partition indexes."""
    pages: list[list[tuple[str, list[int]]]] = []
    cursor: tuple[str, int] | None = None
    while True:
        resp = _describe(w, topics, limit, cursor)
        page = [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in resp["topics"]
                if t["name"] in TOPICS]  # fmt: skip
        pages.append(page)
        nxt = resp["next_cursor"]
        if nxt is None:
            return pages
        cursor = (nxt["topic_name"], nxt["partition_index"])
        assert len(pages) < 20


def test_pages_of_every_topic_follow_the_cursor(wire: Wire) -> None:
    pages = _pages(wire, [], 2)
    flat = [(t, p) for page in pages for t, ps in page for p in ps]
    assert flat == [(t, p) for t, n in TOPICS.items() for p in range(n)]  # each partition once, in order
    assert pages[0] == [("dtp-a", [0, 1])]  # the limit stops inside a topic
    assert pages[1] == [("dtp-a", [2])] or pages[1][0] == ("dtp-a", [2])


def test_named_topics_a_page_at_a_time_with_unknown_and_invalid_names(wire: Wire) -> None:
    resp = _describe(wire, ["dtp-c", "dtp-a", "no-such-topic", "bad/name"], limit=3)
    by_name = {t["name"]: t for t in resp["topics"]}
    assert by_name["bad/name"]["error_code"] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert [p["partition_index"] for p in by_name["dtp-a"]["partitions"]] == [0, 1, 2]
    assert by_name["dtp-a"]["topic_id"] != uuid.UUID(int=0)
    # the limit (3) is spent on dtp-a: the next page starts at the following topic, partition 0
    assert resp["next_cursor"] == {"topic_name": "dtp-c", "partition_index": 0}
    resp = _describe(wire, ["dtp-c", "dtp-a", "no-such-topic", "bad/name"], limit=3, cursor=("dtp-c", 0))
    by_name = {t["name"]: t for t in resp["topics"]}
    assert set(by_name) == {"dtp-c", "no-such-topic"} and resp["next_cursor"] is None
    assert by_name["no-such-topic"]["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["dtp-c"]["partitions"][0]["leader_id"] == 0


def test_the_broker_limit_bounds_a_larger_request_limit(wire: Wire) -> None:
    resp = _describe(wire, [], limit=1000)  # max.request.partition.size.limit=5 wins
    assert sum(len(t["partitions"]) for t in resp["topics"]) == 5
    assert resp["next_cursor"] == {"topic_name": "dtp-c", "partition_index": 0}


def test_a_cursor_outside_the_named_topics_is_an_invalid_request(wire: Wire) -> None:
    resp = _describe(wire, ["dtp-a"], cursor=("dtp-b", 0))
    assert [t["error_code"] for t in resp["topics"]] == [ErrorCode.INVALID_REQUEST]
