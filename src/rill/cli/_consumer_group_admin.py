"""What ``rill groups`` shows of consumer groups (KIP-848) beyond confluent-kafka's description: the group and
assignment epochs and each member's epoch, read with ConsumerGroupDescribe from the group's coordinator."""

from __future__ import annotations

import argparse
from typing import Any

from rill.cli._client_security import rill_client_security
from rill.client.client import KafkaClient
from rill.errors import KafkaError
from rill.protocol import ApiKey

TP = tuple[str, int]
# ConsumerGroupDescribe v1's MemberType: the protocol a member of a consumer group uses (a group that moved from
# the classic protocol keeps its classic members until they restart with the consumer protocol).
_MEMBER_TYPES = {0: "classic", 1: "consumer"}


def group_type(described: Any) -> str:
    """``classic`` or ``consumer`` (``unknown`` when the broker does not say)."""
    kind = getattr(described, "type", None)
    name = str(getattr(kind, "name", kind or "unknown")).lower()
    return name if name in ("classic", "consumer") else "unknown"


def _tps(assignment: dict[str, Any]) -> list[TP]:
    return sorted((t["topic_name"], p) for t in assignment["topic_partitions"] for p in t["partitions"])


def consumer_group_epochs(args: argparse.Namespace, groups: list[str]) -> dict[str, dict[str, Any]]:
    """For each consumer group: ``state``, ``group_epoch``, ``assignment_epoch`` and, per member id,
    ``member_epoch``, ``target`` (its target assignment) and ``protocol`` (None when the broker does not say).
    Groups that cannot be described so are left out."""
    if not groups:
        return {}
    security = rill_client_security(args.command_config)
    out: dict[str, dict[str, Any]] = {}
    with KafkaClient(args.bootstrap_server, client_id="rill-groups", timeout_s=args.timeout, security=security) as c:
        for group in groups:
            try:
                _, body = c.coordinator(group).request(
                    ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group], "include_authorized_operations": False}
                )
            except (KafkaError, OSError):  # e.g. a broker without the API: the epochs are not shown
                continue
            for g in body["groups"]:
                if g["error_code"] != 0:
                    continue
                out[g["group_id"]] = {
                    "state": g["group_state"],  # confluent-kafka has no Assigning and Reconciling
                    "group_epoch": g["group_epoch"],
                    "assignment_epoch": g["assignment_epoch"],
                    "members": {
                        m["member_id"]: {"member_epoch": m["member_epoch"], "target": _tps(m["target_assignment"]),
                                         "protocol": _MEMBER_TYPES.get(m.get("member_type", -1))}
                        for m in g["members"]
                    },
                }
    return out
