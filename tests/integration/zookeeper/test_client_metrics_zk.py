"""Client metrics subscriptions in ZooKeeper (``/config/client-metrics/<name>``): written through one broker,
followed by every other (so every broker offers them), announced by a change notice, removed with their last
config; a znode another tool wrote that does not decode is skipped and stops nothing."""

from __future__ import annotations

import asyncio
import json

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from tests.integration.zookeeper._mini import start_broker, wait_until

from rill.metadata import zk_layout as zl
from rill.metadata.zk_client_metrics import CONFIG_CHANGES, subscription_path
from rill.testing.zk_faults import Action, Fault

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


@pytest.mark.parametrize("name", ["team/a", ".", "..", "a b%2F"])
def test_any_subscription_name_is_one_znode(connect: str, admin: KazooClient, name: str) -> None:
    """A subscription's name is the client's to choose (Kafka takes any non-empty one): a '/' made nested znodes
    whose subscription no broker saw (the write timed out), '.' and '..' are not znode names. The name is
    percent-encoded into one znode under /config/client-metrics."""

    async def main() -> None:
        b0, b1 = await start_broker(connect, 0, controller=False, wait_timeout_s=5), await start_broker(
            connect, 1, controller=False, wait_timeout_s=5)  # fmt: skip
        try:
            configs = {"metrics": "*"}
            await b0.store.set_client_metrics_configs(name, configs)
            assert dict(b0.store.client_metrics_configs()[name]) == configs
            await wait_until(lambda: dict(b1.store.client_metrics_configs().get(name, {})) == configs,
                             "the other broker follows the subscription")  # fmt: skip
            children = admin.get_children("/config/client-metrics")
            assert len(children) == 1 and not admin.get_children(f"/config/client-metrics/{children[0]}")
            await b1.store.set_client_metrics_configs(name, {})
            assert admin.get_children("/config/client-metrics") == []
            await wait_until(lambda: name not in b0.store.client_metrics_configs(), "the removal followed")
        finally:
            await b0.close()
            await b1.close()

    asyncio.run(main())


def test_a_subscription_is_never_written_without_its_change_notice(connect: str, admin: KazooClient) -> None:
    """The subscription's znode and its change notice are one transaction: a notice that fails leaves nothing
    written (before: the subscription was in effect on every broker while its writer was told it failed)."""

    async def main() -> None:
        b0, b1 = await start_broker(connect, 0, controller=False), await start_broker(connect, 1, controller=False)
        try:
            lost = b0.client.inject(Fault("create", f"{CONFIG_CHANGES}/config_change_*", Action.FAIL))
            with pytest.raises(ConnectionLoss):
                await b0.store.set_client_metrics_configs("producers", {"metrics": "*"})
            assert lost.acted == 1
            assert admin.exists(subscription_path("producers")) is None
            assert "producers" not in b0.store.client_metrics_configs()
            await b0.store.set_client_metrics_configs("producers", {"metrics": "org."})  # the client's retry
            retried = {"metrics": "org."}
            await wait_until(lambda: dict(b1.store.client_metrics_configs().get("producers", {})) == retried,
                             "the other broker follows the subscription")  # fmt: skip
            lost = b0.client.inject(Fault("create", f"{CONFIG_CHANGES}/config_change_*", Action.FAIL))
            with pytest.raises(ConnectionLoss):
                await b0.store.set_client_metrics_configs("producers", {})
            assert admin.exists(subscription_path("producers")) is not None  # a removal likewise
        finally:
            await b0.close()
            await b1.close()

    asyncio.run(main())


def test_a_subscription_write_applied_then_lost_is_whole_and_retried(connect: str, admin: KazooClient) -> None:
    """The transaction applied, its answer lost with the connection: the writer is told ConnectionLoss, yet the
    subscription and its notice are both there, every broker follows it, and the client's retry succeeds."""

    async def main() -> None:
        b0, b1 = await start_broker(connect, 0, controller=False), await start_broker(connect, 1, controller=False)
        try:
            lost = b0.client.inject(Fault("create", f"{CONFIG_CHANGES}/config_change_*", Action.APPLY_THEN_FAIL))
            with pytest.raises(ConnectionLoss):
                await b0.store.set_client_metrics_configs("producers", {"metrics": "*"})
            assert lost.acted == 1
            assert zl.decode_configs(admin.get(subscription_path("producers"))[0]) == {"metrics": "*"}
            notices = [json.loads(admin.get(f"{CONFIG_CHANGES}/{c}")[0]) for c in admin.get_children(CONFIG_CHANGES)]
            assert notices == [{"version": 2, "entity_path": "client-metrics/producers"}]
            await wait_until(lambda: dict(b1.store.client_metrics_configs().get("producers", {})) == {"metrics": "*"},
                             "the other broker follows the subscription")  # fmt: skip
            await b0.store.set_client_metrics_configs("producers", {"metrics": "*"})  # the client's retry
        finally:
            await b0.close()
            await b1.close()

    asyncio.run(main())
