"""Config and log-dir administration: DescribeConfigs (32), AlterConfigs (33),
IncrementalAlterConfigs (44), AlterReplicaLogDirs (34), DescribeLogDirs (35)."""

from __future__ import annotations

from rill.protocol.schema import field, message

DESCRIBE_CONFIGS_REQUEST = message("DescribeConfigsRequest", 32, "0-4", "4+", [
    field("Resources", "[]DescribeConfigsResource", "0+", fields=[
        field("ResourceType", "int8", "0+"),
        field("ResourceName", "string", "0+"),
        field("ConfigurationKeys", "[]string", "0+", nullable="0+"),
    ]),
    field("IncludeSynonyms", "bool", "1+", default=False),
    field("IncludeDocumentation", "bool", "3+", default=False),
])


DESCRIBE_CONFIGS_RESPONSE = message("DescribeConfigsResponse", 32, "0-4", "4+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Results", "[]DescribeConfigsResult", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+"),
        field("ResourceType", "int8", "0+"),
        field("ResourceName", "string", "0+"),
        field("Configs", "[]DescribeConfigsResourceResult", "0+", fields=[
            field("Name", "string", "0+"),
            field("Value", "string", "0+", nullable="0+"),
            field("ReadOnly", "bool", "0+"),
            field("ConfigSource", "int8", "1+", default=-1),
            field("IsDefault", "bool", "0"),
            field("IsSensitive", "bool", "0+"),
            field("Synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                field("Name", "string", "1+"),
                field("Value", "string", "1+", nullable="0+"),
                field("Source", "int8", "1+"),
            ]),
            field("ConfigType", "int8", "3+", default=0),
            field("Documentation", "string", "3+", nullable="0+"),
        ]),
    ]),
])


ALTER_CONFIGS_REQUEST = message("AlterConfigsRequest", 33, "0-2", "2+", [
    field("Resources", "[]AlterConfigsResource", "0+", fields=[
        field("ResourceType", "int8", "0+"),
        field("ResourceName", "string", "0+"),
        field("Configs", "[]AlterableConfig", "0+", fields=[
            field("Name", "string", "0+"),
            field("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    field("ValidateOnly", "bool", "0+"),
])


ALTER_CONFIGS_RESPONSE = message("AlterConfigsResponse", 33, "0-2", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+"),
        field("ResourceType", "int8", "0+"),
        field("ResourceName", "string", "0+"),
    ]),
])


INCREMENTAL_ALTER_CONFIGS_REQUEST = message("IncrementalAlterConfigsRequest", 44, "0-1", "1+", [
    field("Resources", "[]AlterConfigsResource", "0+", fields=[
        field("ResourceType", "int8", "0+"),
        field("ResourceName", "string", "0+"),
        field("Configs", "[]AlterableConfig", "0+", fields=[
            field("Name", "string", "0+"),
            field("ConfigOperation", "int8", "0+"),
            field("Value", "string", "0+", nullable="0+"),
        ]),
    ]),
    field("ValidateOnly", "bool", "0+"),
])


INCREMENTAL_ALTER_CONFIGS_RESPONSE = message("IncrementalAlterConfigsResponse", 44, "0-1", "1+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+"),
        field("ResourceType", "int8", "0+"),
        field("ResourceName", "string", "0+"),
    ]),
])


ALTER_REPLICA_LOG_DIRS_REQUEST = message("AlterReplicaLogDirsRequest", 34, "0-2", "2+", [
    field("Dirs", "[]AlterReplicaLogDir", "0+", fields=[
        field("Path", "string", "0+"),
        field("Topics", "[]AlterReplicaLogDirTopic", "0+", fields=[
            field("Name", "string", "0+"),
            field("Partitions", "[]int32", "0+"),
        ]),
    ]),
])


ALTER_REPLICA_LOG_DIRS_RESPONSE = message("AlterReplicaLogDirsResponse", 34, "0-2", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Results", "[]AlterReplicaLogDirTopicResult", "0+", fields=[
        field("TopicName", "string", "0+"),
        field("Partitions", "[]AlterReplicaLogDirPartitionResult", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])


DESCRIBE_LOG_DIRS_REQUEST = message("DescribeLogDirsRequest", 35, "0-5", "2+", [
    field("Topics", "[]DescribableLogDirTopic", "0+", nullable="0+", fields=[
        field("Topic", "string", "0+"),
        field("Partitions", "[]int32", "0+"),
    ]),
])


DESCRIBE_LOG_DIRS_RESPONSE = message("DescribeLogDirsResponse", 35, "0-5", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "3+"),
    field("Results", "[]DescribeLogDirsResult", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("LogDir", "string", "0+"),
        field("Topics", "[]DescribeLogDirsTopic", "0+", fields=[
            field("Name", "string", "0+"),
            field("Partitions", "[]DescribeLogDirsPartition", "0+", fields=[
                field("PartitionIndex", "int32", "0+"),
                field("PartitionSize", "int64", "0+"),
                field("OffsetLag", "int64", "0+"),
                field("IsFutureKey", "bool", "0+"),
            ]),
        ]),
        field("TotalBytes", "int64", "4+", default=-1),
        field("UsableBytes", "int64", "4+", default=-1),
        field("IsCordoned", "bool", "5+", default=False),
    ]),
])

APIS = [
    (DESCRIBE_CONFIGS_REQUEST, DESCRIBE_CONFIGS_RESPONSE),
    (ALTER_CONFIGS_REQUEST, ALTER_CONFIGS_RESPONSE),
    (INCREMENTAL_ALTER_CONFIGS_REQUEST, INCREMENTAL_ALTER_CONFIGS_RESPONSE),
    (ALTER_REPLICA_LOG_DIRS_REQUEST, ALTER_REPLICA_LOG_DIRS_RESPONSE),
    (DESCRIBE_LOG_DIRS_REQUEST, DESCRIBE_LOG_DIRS_RESPONSE),
]
