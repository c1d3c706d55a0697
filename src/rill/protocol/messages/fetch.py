"""Fetch (1)."""

from __future__ import annotations

from rill.protocol.schema import field, message

FETCH_REQUEST = message("FetchRequest", 1, "0-18", "12+", [
    field("ClusterId", "string", "12+", nullable="12+", tag=0, default=None),
    field("ReplicaId", "int32", "0-14", default=-1),
    field("ReplicaState", "ReplicaState", "15+", tag=1, fields=[
        field("ReplicaId", "int32", "15+", default=-1),
        field("ReplicaEpoch", "int64", "15+", default=-1),
    ]),
    field("MaxWaitMs", "int32", "0+"),
    field("MinBytes", "int32", "0+"),
    field("MaxBytes", "int32", "3+", default=2147483647),
    field("IsolationLevel", "int8", "4+", default=0),
    field("SessionId", "int32", "7+", default=0),
    field("SessionEpoch", "int32", "7+", default=-1),
    field("Topics", "[]FetchTopic", "0+", fields=[
        field("Topic", "string", "0-12"),
        field("TopicId", "uuid", "13+"),
        field("Partitions", "[]FetchPartition", "0+", fields=[
            field("Partition", "int32", "0+"),
            field("CurrentLeaderEpoch", "int32", "9+", default=-1),
            field("FetchOffset", "int64", "0+"),
            field("LastFetchedEpoch", "int32", "12+", default=-1),
            field("LogStartOffset", "int64", "5+", default=-1),
            field("PartitionMaxBytes", "int32", "0+"),
            field("ReplicaDirectoryId", "uuid", "17+", tag=0),
            field("HighWatermark", "int64", "18+", tag=1, default=9223372036854775807),
        ]),
    ]),
    field("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=[
        field("Topic", "string", "7-12"),
        field("TopicId", "uuid", "13+"),
        field("Partitions", "[]int32", "7+"),
    ]),
    field("RackId", "string", "11+", default=""),
])


FETCH_RESPONSE = message("FetchResponse", 1, "0-18", "12+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("ErrorCode", "int16", "7+"),
    field("SessionId", "int32", "7+", default=0),
    field("Responses", "[]FetchableTopicResponse", "0+", fields=[
        field("Topic", "string", "0-12"),
        field("TopicId", "uuid", "13+"),
        field("Partitions", "[]PartitionData", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("HighWatermark", "int64", "0+"),
            field("LastStableOffset", "int64", "4+", default=-1),
            field("LogStartOffset", "int64", "5+", default=-1),
            field("DivergingEpoch", "EpochEndOffset", "12+", tag=0, fields=[
                field("Epoch", "int32", "12+", default=-1),
                field("EndOffset", "int64", "12+", default=-1),
            ]),
            field("CurrentLeader", "LeaderIdAndEpoch", "12+", tag=1, fields=[
                field("LeaderId", "int32", "12+", default=-1),
                field("LeaderEpoch", "int32", "12+", default=-1),
            ]),
            field("SnapshotId", "SnapshotId", "12+", tag=2, fields=[
                field("EndOffset", "int64", "0+", default=-1),
                field("Epoch", "int32", "0+", default=-1),
            ]),
            field("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+", fields=[
                field("ProducerId", "int64", "4+"),
                field("FirstOffset", "int64", "4+"),
            ]),
            field("PreferredReadReplica", "int32", "11+", default=-1),
            field("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
    field("NodeEndpoints", "[]NodeEndpoint", "16+", tag=0, fields=[
        field("NodeId", "int32", "16+"),
        field("Host", "string", "16+"),
        field("Port", "int32", "16+"),
        field("Rack", "string", "16+", nullable="16+", default=None),
    ]),
])

APIS = [
    (FETCH_REQUEST, FETCH_RESPONSE),
]
