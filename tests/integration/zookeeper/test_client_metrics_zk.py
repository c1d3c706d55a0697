"""Client metrics subscriptions in ZooKeeper (``/config/client-metrics/<name>``): written through one broker,
followed by every other (so every broker offers them), announced by a change notice, removed with their last
config; a znode another tool wrote that does not decode is skipped and stops nothing."""

from __future__ import annotations

import asyncio
import json

import pytest
from kazoo.client import KazooClient
from tests.integration.zookeeper._mini import start_broker, wait_until

from rill.metadata import zk_layout as zl
from rill.metadata.zk_client_metrics import CONFIG_CHANGES, subscription_path

pytestmark = pytest.mark.timeout(120)


def test_a_subscription_written_through_one_broker_is_followed_by_the_other(connect: str, admin: KazooClient) -> None:
    async def main() -> None:
        admin.create(subscription_path("broken"), b"{not json", makepath=True)
        b0, b1 = await start_broker(connect, 0, controller=False), await start_broker(connect, 1, controller=False)
        try:
            configs = {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}
            await b0.store.set_client_metrics_configs("producers", configs)
            assert dict(b0.store.client_metrics_configs()["producers"]) == configs  # in effect once it returns
            await wait_until(lambda: dict(b1.store.client_metrics_configs().get("producers", {})) == configs,
                             "the other broker follows the subscription")  # fmt: skip
            assert zl.decode_configs(admin.get(subscription_path("producers"))[0]) == configs
            notices = [json.loads(admin.get(f"{CONFIG_CHANGES}/{c}")[0]) for c in admin.get_children(CONFIG_CHANGES)]
            assert {"version": 2, "entity_path": "client-metrics/producers"} in notices
            assert "broken" not in b1.store.client_metrics_configs()
            await b1.store.set_client_metrics_configs("producers", {})
            assert admin.exists(subscription_path("producers")) is None
            await wait_until(lambda: "producers" not in b0.store.client_metrics_configs(), "the removal followed")
        finally:
            await b0.close()
            await b1.close()

    asyncio.run(main())
