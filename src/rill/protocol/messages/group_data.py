"""Payloads that are not APIs: the consumer protocol's subscription and assignment (carried as bytes
in JoinGroup/SyncGroup) and the key/value records of ``__consumer_offsets``.

Each is serialized after an int16 version prefix (see ``rill.protocol.api.encode_versioned``)."""

from __future__ import annotations

from rill.protocol.schema import field, message

CONSUMER_PROTOCOL_SUBSCRIPTION = message("ConsumerProtocolSubscription", None, "0-3", "none", [
    field("Topics", "[]string", "0+"),
    field("UserData", "bytes", "0+", nullable="0+", default=None),
    field("OwnedPartitions", "[]TopicPartition", "1+", fields=[
        field("Topic", "string", "1+"),
        field("Partitions", "[]int32", "1+"),
    ]),
    field("GenerationId", "int32", "2+", default=-1),
    field("RackId", "string", "3+", nullable="3+", default=None),
])


CONSUMER_PROTOCOL_ASSIGNMENT = message("ConsumerProtocolAssignment", None, "0-3", "none", [
    field("AssignedPartitions", "[]TopicPartition", "0+", fields=[
        field("Topic", "string", "0+"),
        field("Partitions", "[]int32", "0+"),
    ]),
    field("UserData", "bytes", "0+", nullable="0+", default=None),
])


OFFSET_COMMIT_KEY = message("OffsetCommitKey", None, "0-1", "none", [
    field("group", "string", "0-1"),
    field("topic", "string", "0-1"),
    field("partition", "int32", "0-1"),
])


OFFSET_COMMIT_VALUE = message("OffsetCommitValue", None, "0-4", "4+", [
    field("offset", "int64", "0+"),
    field("leaderEpoch", "int32", "3+", default=-1),
    field("metadata", "string", "0+"),
    field("commitTimestamp", "int64", "0+"),
    field("expireTimestamp", "int64", "1", default=-1),
])


GROUP_METADATA_KEY = message("GroupMetadataKey", None, "2", "none", [
    field("group", "string", "2"),
])


GROUP_METADATA_VALUE = message("GroupMetadataValue", None, "0-4", "4+", [
    field("protocolType", "string", "0+"),
    field("generation", "int32", "0+"),
    field("protocol", "string", "0+", nullable="0+"),
    field("leader", "string", "0+", nullable="0+"),
    field("currentStateTimestamp", "int64", "2+", default=-1),
    field("members", "[]MemberMetadata", "0+", fields=[
        field("memberId", "string", "0+"),
        field("groupInstanceId", "string", "3+", nullable="3+", default=None),
        field("clientId", "string", "0+"),
        field("clientHost", "string", "0+"),
        field("rebalanceTimeout", "int32", "1+", default=-1),
        field("sessionTimeout", "int32", "0+"),
        field("subscription", "bytes", "0+"),
        field("assignment", "bytes", "0+"),
    ]),
])

DATA = [
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    CONSUMER_PROTOCOL_ASSIGNMENT,
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
    GROUP_METADATA_KEY,
    GROUP_METADATA_VALUE,
]
