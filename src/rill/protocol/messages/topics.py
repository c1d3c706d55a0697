"""Topic administration: CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21)."""

from __future__ import annotations

from rill.protocol.schema import field, message

CREATE_TOPICS_REQUEST = message("CreateTopicsRequest", 19, "0-7", "5+", [
    field("Topics", "[]CreatableTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("NumPartitions", "int32", "0+"),
        field("ReplicationFactor", "int16", "0+"),
        field("Assignments", "[]CreatableReplicaAssignment", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("BrokerIds", "[]int32", "0+"),
        ]),
        field("Configs", "[]CreatableTopicConfig", "0+", fields=[
            field("Name", "string", "0+"),
            field("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    field("timeoutMs", "int32", "0+", default=60000),
    field("validateOnly", "bool", "1+", default=False),
])


CREATE_TOPICS_RESPONSE = message("CreateTopicsResponse", 19, "0-7", "5+", [
    field("ThrottleTimeMs", "int32", "2+"),
    field("Topics", "[]CreatableTopicResult", "0+", fields=[
        field("Name", "string", "0+"),
        field("TopicId", "uuid", "7+"),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "1+", nullable="0+"),
        field("TopicConfigErrorCode", "int16", "5+", tag=0),
        field("NumPartitions", "int32", "5+", default=-1),
        field("ReplicationFactor", "int16", "5+", default=-1),
        field("Configs", "[]CreatableTopicConfigs", "5+", nullable="5+", fields=[
            field("Name", "string", "5+"),
            field("Value", "string", "5+", nullable="5+"),
            field("ReadOnly", "bool", "5+"),
            field("ConfigSource", "int8", "5+", default=-1),
            field("IsSensitive", "bool", "5+"),
        ]),
    ]),
])


DELETE_TOPICS_REQUEST = message("DeleteTopicsRequest", 20, "0-6", "4+", [
    field("Topics", "[]DeleteTopicState", "6+", fields=[
        field("Name", "string", "6+", nullable="6+", default=None),
        field("TopicId", "uuid", "6+"),
    ]),
    field("TopicNames", "[]string", "0-5"),
    field("TimeoutMs", "int32", "0+"),
])


DELETE_TOPICS_RESPONSE = message("DeleteTopicsResponse", 20, "0-6", "4+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("Responses", "[]DeletableTopicResult", "0+", fields=[
        field("Name", "string", "0+", nullable="6+"),
        field("TopicId", "uuid", "6+"),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "5+", nullable="5+", default=None),
    ]),
])


CREATE_PARTITIONS_REQUEST = message("CreatePartitionsRequest", 37, "0-3", "2+", [
    field("Topics", "[]CreatePartitionsTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Count", "int32", "0+"),
        field("Assignments", "[]CreatePartitionsAssignment", "0+", nullable="0+", fields=[
            field("BrokerIds", "[]int32", "0+"),
        ]),
    ]),
    field("TimeoutMs", "int32", "0+"),
    field("ValidateOnly", "bool", "0+"),
])


CREATE_PARTITIONS_RESPONSE = message("CreatePartitionsResponse", 37, "0-3", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Results", "[]CreatePartitionsTopicResult", "0+", fields=[
        field("Name", "string", "0+"),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])


DELETE_RECORDS_REQUEST = message("DeleteRecordsRequest", 21, "0-2", "2+", [
    field("Topics", "[]DeleteRecordsTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]DeleteRecordsPartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("Offset", "int64", "0+"),
        ]),
    ]),
    field("TimeoutMs", "int32", "0+"),
])


DELETE_RECORDS_RESPONSE = message("DeleteRecordsResponse", 21, "0-2", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Topics", "[]DeleteRecordsTopicResult", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]DeleteRecordsPartitionResult", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("LowWatermark", "int64", "0+"),
            field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])

APIS = [
    (CREATE_TOPICS_REQUEST, CREATE_TOPICS_RESPONSE),
    (DELETE_TOPICS_REQUEST, DELETE_TOPICS_RESPONSE),
    (CREATE_PARTITIONS_REQUEST, CREATE_PARTITIONS_RESPONSE),
    (DELETE_RECORDS_REQUEST, DELETE_RECORDS_RESPONSE),
]
