"""Static membership over the wire: a second member with the same ``group.instance.id`` takes the place of the
first, keeps its assignment, and the old member is fenced with FENCED_INSTANCE_ID."""

from __future__ import annotations

import pytest
from tests.integration.broker._wire import Wire

from rill.errors import ErrorCode
from rill.protocol import ApiKey


def _join(w: Wire, member_id: str, instance: str) -> dict:
    return w.call(
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": "static-g",
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": member_id,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
        },
    )


def _heartbeat(w: Wire, generation: int, member_id: str, instance: str) -> int:
    return w.call(
        ApiKey.HEARTBEAT,
        3,
        {"group_id": "static-g", "generation_id": generation, "member_id": member_id, "group_instance_id": instance},
    )["error_code"]


@pytest.mark.rill_broker_config(**{"group.initial.rebalance.delay.ms": "0"})
def test_duplicate_instance_id_fences_the_old_member(rill_broker) -> None:
    a, b = Wire(rill_broker.bootstrap_servers, timeout=30), Wire(rill_broker.bootstrap_servers, timeout=30)
    try:
        first = _join(a, "", "instance-1")
        assert first["error_code"] == 0, first
        generation, old_id = first["generation_id"], first["member_id"]
        sync = a.call(
            ApiKey.SYNC_GROUP,
            3,
            {
                "group_id": "static-g",
                "generation_id": generation,
                "member_id": old_id,
                "group_instance_id": "instance-1",
                "assignments": [{"member_id": old_id, "assignment": b"assignment-of-1"}],
            },
        )
        assert (sync["error_code"], bytes(sync["assignment"])) == (0, b"assignment-of-1")
        assert _heartbeat(a, generation, old_id, "instance-1") == 0

        second = _join(b, "", "instance-1")  # the same static member, restarted elsewhere
        assert second["error_code"] == 0, second
        assert second["member_id"] != old_id
        assert second["generation_id"] == generation  # no rebalance for a known static member
        resync = b.call(
            ApiKey.SYNC_GROUP,
            3,
            {
                "group_id": "static-g",
                "generation_id": second["generation_id"],
                "member_id": second["member_id"],
                "group_instance_id": "instance-1",
                "assignments": [],
            },
        )
        assert (resync["error_code"], bytes(resync["assignment"])) == (0, b"assignment-of-1")

        assert _heartbeat(a, generation, old_id, "instance-1") == ErrorCode.FENCED_INSTANCE_ID
        assert _heartbeat(b, second["generation_id"], second["member_id"], "instance-1") == 0
    finally:
        a.close()
        b.close()
