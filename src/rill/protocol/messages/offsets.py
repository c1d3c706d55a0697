"""Committed offsets: OffsetCommit (8), OffsetFetch (9), OffsetDelete (47)."""

from __future__ import annotations

from rill.protocol.schema import field, message

OFFSET_COMMIT_REQUEST = message("OffsetCommitRequest", 8, "0-10", "8+", [
    field("GroupId", "string", "0+"),
    field("GenerationIdOrMemberEpoch", "int32", "1+", default=-1),
    field("MemberId", "string", "1+"),
    field("GroupInstanceId", "string", "7+", nullable="7+", default=None),
    field("RetentionTimeMs", "int64", "2-4", default=-1),
    field("Topics", "[]OffsetCommitRequestTopic", "0+", fields=[
        field("Name", "string", "0-9"),
        field("TopicId", "uuid", "10+"),
        field("Partitions", "[]OffsetCommitRequestPartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("CommittedOffset", "int64", "0+"),
            field("CommittedLeaderEpoch", "int32", "6+", default=-1),
            field("CommitTimestamp", "int64", "1", default=-1),
            field("CommittedMetadata", "string", "0+", nullable="0+"),
        ]),
    ]),
])


OFFSET_COMMIT_RESPONSE = message("OffsetCommitResponse", 8, "0-10", "8+", [
    field("ThrottleTimeMs", "int32", "3+"),
    field("Topics", "[]OffsetCommitResponseTopic", "0+", fields=[
        field("Name", "string", "0-9"),
        field("TopicId", "uuid", "10+"),
        field("Partitions", "[]OffsetCommitResponsePartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])


OFFSET_FETCH_REQUEST = message("OffsetFetchRequest", 9, "0-10", "6+", [
    field("GroupId", "string", "0-7"),
    field("Topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
        field("Name", "string", "0-7"),
        field("PartitionIndexes", "[]int32", "0-7"),
    ]),
    field("Groups", "[]OffsetFetchRequestGroup", "8+", fields=[
        field("GroupId", "string", "8+"),
        field("MemberId", "string", "9+", nullable="9+", default=None),
        field("MemberEpoch", "int32", "9+", default=-1),
        field("Topics", "[]OffsetFetchRequestTopics", "8+", nullable="8+", fields=[
            field("Name", "string", "8-9"),
            field("TopicId", "uuid", "10+"),
            field("PartitionIndexes", "[]int32", "8+"),
        ]),
    ]),
    field("RequireStable", "bool", "7+", default=False),
])


OFFSET_FETCH_RESPONSE = message("OffsetFetchResponse", 9, "0-10", "6+", [
    field("ThrottleTimeMs", "int32", "3+"),
    field("Topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
        field("Name", "string", "0-7"),
        field("Partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
            field("PartitionIndex", "int32", "0-7"),
            field("CommittedOffset", "int64", "0-7"),
            field("CommittedLeaderEpoch", "int32", "5-7", default=-1),
            field("Metadata", "string", "0-7", nullable="0-7"),
            field("ErrorCode", "int16", "0-7"),
        ]),
    ]),
    field("ErrorCode", "int16", "2-7", default=0),
    field("Groups", "[]OffsetFetchResponseGroup", "8+", fields=[
        field("GroupId", "string", "8+"),
        field("Topics", "[]OffsetFetchResponseTopics", "8+", fields=[
            field("Name", "string", "8-9"),
            field("TopicId", "uuid", "10+"),
            field("Partitions", "[]OffsetFetchResponsePartitions", "8+", fields=[
                field("PartitionIndex", "int32", "8+"),
                field("CommittedOffset", "int64", "8+"),
                field("CommittedLeaderEpoch", "int32", "8+", default=-1),
                field("Metadata", "string", "8+", nullable="8+"),
                field("ErrorCode", "int16", "8+"),
            ]),
        ]),
        field("ErrorCode", "int16", "8+", default=0),
    ]),
])


OFFSET_DELETE_REQUEST = message("OffsetDeleteRequest", 47, "0", "none", [
    field("GroupId", "string", "0+"),
    field("Topics", "[]OffsetDeleteRequestTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]OffsetDeleteRequestPartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
        ]),
    ]),
])


OFFSET_DELETE_RESPONSE = message("OffsetDeleteResponse", 47, "0", "none", [
    field("ErrorCode", "int16", "0+"),
    field("ThrottleTimeMs", "int32", "0+"),
    field("Topics", "[]OffsetDeleteResponseTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]OffsetDeleteResponsePartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

APIS = [
    (OFFSET_COMMIT_REQUEST, OFFSET_COMMIT_RESPONSE),
    (OFFSET_FETCH_REQUEST, OFFSET_FETCH_RESPONSE),
    (OFFSET_DELETE_REQUEST, OFFSET_DELETE_RESPONSE),
]
