"""ListOffsets (2) and OffsetForLeaderEpoch (23)."""

from __future__ import annotations

from rill.protocol.schema import field, message

LIST_OFFSETS_REQUEST = message("ListOffsetsRequest", 2, "0-11", "6+", [
    field("ReplicaId", "int32", "0+"),
    field("IsolationLevel", "int8", "2+"),
    field("Topics", "[]ListOffsetsTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]ListOffsetsPartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("CurrentLeaderEpoch", "int32", "4+", default=-1),
            field("Timestamp", "int64", "0+"),
            field("MaxNumOffsets", "int32", "0", default=1),
        ]),
    ]),
    field("TimeoutMs", "int32", "10+"),
])


LIST_OFFSETS_RESPONSE = message("ListOffsetsResponse", 2, "0-11", "6+", [
    field("ThrottleTimeMs", "int32", "2+"),
    field("Topics", "[]ListOffsetsTopicResponse", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]ListOffsetsPartitionResponse", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("OldStyleOffsets", "[]int64", "0"),
            field("Timestamp", "int64", "1+", default=-1),
            field("Offset", "int64", "1+", default=-1),
            field("LeaderEpoch", "int32", "4+", default=-1),
        ]),
    ]),
])


OFFSET_FOR_LEADER_EPOCH_REQUEST = message("OffsetForLeaderEpochRequest", 23, "0-4", "4+", [
    field("ReplicaId", "int32", "3+", default=-2),
    field("Topics", "[]OffsetForLeaderTopic", "0+", fields=[
        field("Topic", "string", "0+"),
        field("Partitions", "[]OffsetForLeaderPartition", "0+", fields=[
            field("Partition", "int32", "0+"),
            field("CurrentLeaderEpoch", "int32", "2+", default=-1),
            field("LeaderEpoch", "int32", "0+"),
        ]),
    ]),
])


OFFSET_FOR_LEADER_EPOCH_RESPONSE = message("OffsetForLeaderEpochResponse", 23, "0-4", "4+", [
    field("ThrottleTimeMs", "int32", "2+"),
    field("Topics", "[]OffsetForLeaderTopicResult", "0+", fields=[
        field("Topic", "string", "0+"),
        field("Partitions", "[]EpochEndOffset", "0+", fields=[
            field("ErrorCode", "int16", "0+"),
            field("Partition", "int32", "0+"),
            field("LeaderEpoch", "int32", "1+", default=-1),
            field("EndOffset", "int64", "0+", default=-1),
        ]),
    ]),
])

APIS = [
    (LIST_OFFSETS_REQUEST, LIST_OFFSETS_RESPONSE),
    (OFFSET_FOR_LEADER_EPOCH_REQUEST, OFFSET_FOR_LEADER_EPOCH_RESPONSE),
]
