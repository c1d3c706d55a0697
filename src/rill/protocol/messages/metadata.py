"""Metadata (3), DescribeCluster (60) and DescribeTopicPartitions (75)."""

from __future__ import annotations

from rill.protocol.schema import field, message

METADATA_REQUEST = message("MetadataRequest", 3, "0-13", "9+", [
    field("Topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
        field("TopicId", "uuid", "10+"),
        field("Name", "string", "0+", nullable="10+"),
    ]),
    field("AllowAutoTopicCreation", "bool", "4+", default=True),
    field("IncludeClusterAuthorizedOperations", "bool", "8-10"),
    field("IncludeTopicAuthorizedOperations", "bool", "8+"),
])


METADATA_RESPONSE = message("MetadataResponse", 3, "0-13", "9+", [
    field("ThrottleTimeMs", "int32", "3+"),
    field("Brokers", "[]MetadataResponseBroker", "0+", fields=[
        field("NodeId", "int32", "0+"),
        field("Host", "string", "0+"),
        field("Port", "int32", "0+"),
        field("Rack", "string", "1+", nullable="1+", default=None),
    ]),
    field("ClusterId", "string", "2+", nullable="2+", default=None),
    field("ControllerId", "int32", "1+", default=-1),
    field("Topics", "[]MetadataResponseTopic", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("Name", "string", "0+", nullable="12+"),
        field("TopicId", "uuid", "10+"),
        field("IsInternal", "bool", "1+", default=False),
        field("Partitions", "[]MetadataResponsePartition", "0+", fields=[
            field("ErrorCode", "int16", "0+"),
            field("PartitionIndex", "int32", "0+"),
            field("LeaderId", "int32", "0+"),
            field("LeaderEpoch", "int32", "7+", default=-1),
            field("ReplicaNodes", "[]int32", "0+"),
            field("IsrNodes", "[]int32", "0+"),
            field("OfflineReplicas", "[]int32", "5+"),
        ]),
        field("TopicAuthorizedOperations", "int32", "8+", default=-2147483648),
    ]),
    field("ClusterAuthorizedOperations", "int32", "8-10", default=-2147483648),
    field("ErrorCode", "int16", "13+"),
])


DESCRIBE_CLUSTER_REQUEST = message("DescribeClusterRequest", 60, "0-2", "0+", [
    field("IncludeClusterAuthorizedOperations", "bool", "0+"),
    field("EndpointType", "int8", "1+", default=1),
    field("IncludeFencedBrokers", "bool", "2+"),
])


DESCRIBE_CLUSTER_RESPONSE = message("DescribeClusterResponse", 60, "0-2", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    field("EndpointType", "int8", "1+", default=1),
    field("ClusterId", "string", "0+"),
    field("ControllerId", "int32", "0+", default=-1),
    field("Brokers", "[]DescribeClusterBroker", "0+", fields=[
        field("BrokerId", "int32", "0+"),
        field("Host", "string", "0+"),
        field("Port", "int32", "0+"),
        field("Rack", "string", "0+", nullable="0+", default=None),
        field("IsFenced", "bool", "2+"),
    ]),
    field("ClusterAuthorizedOperations", "int32", "0+", default=-2147483648),
])

DESCRIBE_TOPIC_PARTITIONS_REQUEST = message("DescribeTopicPartitionsRequest", 75, "0", "0+", [
    field("Topics", "[]TopicRequest", "0+", fields=[
        field("Name", "string", "0+"),
    ]),
    field("ResponsePartitionLimit", "int32", "0+", default=2000),
    field("Cursor", "Cursor", "0+", nullable="0+", default=None, fields=[
        field("TopicName", "string", "0+"),
        field("PartitionIndex", "int32", "0+"),
    ]),
])


DESCRIBE_TOPIC_PARTITIONS_RESPONSE = message("DescribeTopicPartitionsResponse", 75, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Topics", "[]DescribeTopicPartitionsResponseTopic", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("Name", "string", "0+", nullable="0+"),
        field("TopicId", "uuid", "0+"),
        field("IsInternal", "bool", "0+", default=False),
        field("Partitions", "[]DescribeTopicPartitionsResponsePartition", "0+", fields=[
            field("ErrorCode", "int16", "0+"),
            field("PartitionIndex", "int32", "0+"),
            field("LeaderId", "int32", "0+"),
            field("LeaderEpoch", "int32", "0+", default=-1),
            field("ReplicaNodes", "[]int32", "0+"),
            field("IsrNodes", "[]int32", "0+"),
            field("EligibleLeaderReplicas", "[]int32", "0+", nullable="0+", default=None),
            field("LastKnownElr", "[]int32", "0+", nullable="0+", default=None),
            field("OfflineReplicas", "[]int32", "0+"),
        ]),
        field("TopicAuthorizedOperations", "int32", "0+", default=-2147483648),
    ]),
    field("NextCursor", "Cursor", "0+", nullable="0+", default=None, fields=[
        field("TopicName", "string", "0+"),
        field("PartitionIndex", "int32", "0+"),
    ]),
])

APIS = [
    (METADATA_REQUEST, METADATA_RESPONSE),
    (DESCRIBE_CLUSTER_REQUEST, DESCRIBE_CLUSTER_RESPONSE),
    (DESCRIBE_TOPIC_PARTITIONS_REQUEST, DESCRIBE_TOPIC_PARTITIONS_RESPONSE),
]
