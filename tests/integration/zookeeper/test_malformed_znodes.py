"""Znodes a broker did not write: a topic's assignment in a layout Rill does not read (Kafka's version 1, without a
topic id, as Kafka's older tools wrote it), a partition state (not JSON, or with a number that reads as infinity), a
broker registration or a controller znode that is not JSON. Each is logged and skipped; the other topics are still
elected and still reach every broker's image, and a broker still starts."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.client import KazooClient
from tests.integration.zookeeper._mini import active_controller, start_broker, state, wait_until

from rill.metadata import zk_layout as zl

pytestmark = pytest.mark.timeout(120)

LEGACY_ASSIGNMENT = b'{"version":1,"partitions":{"0":[0]}}'


def _poison(admin: KazooClient) -> None:
    admin.ensure_path(zl.TOPICS)
    admin.create(zl.topic_path("legacy"), LEGACY_ASSIGNMENT)
    admin.create(zl.topic_path("garbage"), b"\xff not json")
    admin.create(zl.topic_path("badstate"), b'{"version":3,"topic_id":"00000000-0000-0000-0000-0000000000aa",'
                 b'"partitions":{"0":[0]}}', makepath=True)  # fmt: skip
    admin.create(zl.state_path("badstate", 0), b'{"leader":"x"}', makepath=True)
    # JSON whose number reads as infinity (int() of it raises OverflowError)
    admin.create(zl.topic_path("hugestate"), b'{"version":3,"topic_id":"00000000-0000-0000-0000-0000000000bb",'
                 b'"partitions":{"0":[0]}}', makepath=True)  # fmt: skip
    admin.create(zl.state_path("hugestate", 0), b'{"version":1,"leader":1e999,"leader_epoch":0,"isr":[0],'
                 b'"controller_epoch":1}', makepath=True)  # fmt: skip
    admin.ensure_path(zl.BROKER_IDS)
    admin.create(f"{zl.BROKER_IDS}/7", b"{}")
    admin.create(f"{zl.BROKER_IDS}/not-a-number", b"{}")


def test_malformed_znodes_stop_neither_the_controller_nor_a_broker(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        _poison(admin)
        broker = await start_broker(connect, 0)
        try:
            await wait_until(lambda: active_controller(admin, [broker]) is broker, "broker 0 is the controller")
            await broker.store.create_topic("t", 1, 1, {}, {0: [0]})
            s = state(admin, "t")
            assert s is not None and s.leader == 0
            assert broker.store.topic("t") is not None
            for name in ("legacy", "garbage", "badstate", "hugestate"):
                assert broker.store.topic(name) is None
        finally:
            await broker.close()

    asyncio.run(main())
