"""ShareFetch is held to the fetch quota (``consumer_byte_rate``) as Fetch is: a share fetch asks for no more
than the quota allows at once, and one that takes its client over the quota answers with a throttle time."""

from __future__ import annotations

import pytest
from tests.integration.broker._wire import Wire
from tests.integration.quotas._quota_clients import alter_quotas
from tests.integration.quotas.test_client_quota_admin import _create, _produce

import rill.testing
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)


def _share_fetch(w: Wire, topic_id: object, epoch: int) -> tuple[int, int]:
    body = {"group_id": "sg", "member_id": "m1", "share_session_epoch": epoch, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": 50_000_000, "max_records": 500, "batch_size": 500,
            "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []}  # fmt: skip
    r = w.call(ApiKey.SHARE_FETCH, 1, body)
    assert r["error_code"] == 0, r
    size = sum(len(p["records"] or b"") for t in r["responses"] for p in t["partitions"])
    return int(r["throttle_time_ms"]), size


def test_share_fetch_is_held_to_the_fetch_quota() -> None:
    with rill.testing.broker(quota_window_num=2) as b:
        bootstrap = b.bootstrap_servers
        w = Wire(bootstrap)
        _create(w, "f")
        metadata = {"topics": [{"name": "f", "topic_id": None}], "allow_auto_topic_creation": False}
        topic_id = w.call(ApiKey.METADATA, 12, metadata)["topics"][0]["topic_id"]
        join = {"group_id": "sg", "member_id": "m1", "member_epoch": 0, "rack_id": None,
                "subscribed_topic_names": ["f"]}  # fmt: skip
        joined = w.call(ApiKey.SHARE_GROUP_HEARTBEAT, 1, join)
        assert joined["error_code"] == 0
        assert _share_fetch(w, topic_id, 0) == (0, 0)  # the share partition starts at the log end
        for _ in range(4):
            _produce(w, "f", 300_000)
        alter_quotas(bootstrap, {"client-id": None}, {"consumer_byte_rate": 200_000.0})
        # two windows: at most one window's worth (200 kB) at once, but a first batch always goes
        throttle, size = _share_fetch(w, topic_id, 1)
        assert 300_000 < size < 400_000
        assert throttle > 0  # over the quota: the client is told to wait
        w.close()
