"""Share groups (KIP-932): ShareGroupHeartbeat (76), ShareGroupDescribe (77), ShareFetch (78), ShareAcknowledge
(79), DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92).

Version 0 of the first four was Kafka 4.0's early access and is gone from Kafka 4.1 on; version 1 is the stable
one, which librdkafka's ShareConsumer sends. Kafka 4.2 adds ShareFetch and ShareAcknowledge version 2: the
acquire mode (KIP-1206: batch-optimized, or record-limit, which never acquires more than MaxRecords) and renew
acknowledgements (KIP-1222: IsRenewAck, acknowledge type 4 extends a lock), and ShareAcknowledge's response carries
the acquisition lock timeout."""

from __future__ import annotations

from rill.protocol.schema import field, message

SHARE_GROUP_HEARTBEAT_REQUEST = message("ShareGroupHeartbeatRequest", 76, "1", "0+", [
    field("GroupId", "string", "0+"),
    field("MemberId", "string", "0+"),
    field("MemberEpoch", "int32", "0+"),
    field("RackId", "string", "0+", nullable="0+", default=None),
    field("SubscribedTopicNames", "[]string", "0+", nullable="0+", default=None),
])


SHARE_GROUP_HEARTBEAT_RESPONSE = message("ShareGroupHeartbeatResponse", 76, "1", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    field("MemberId", "string", "0+", nullable="0+", default=None),
    field("MemberEpoch", "int32", "0+"),
    field("HeartbeatIntervalMs", "int32", "0+"),
    field("Assignment", "Assignment", "0+", nullable="0+", default=None, fields=[
        field("TopicPartitions", "[]TopicPartitions", "0+", fields=[
            field("TopicId", "uuid", "0+"),
            field("Partitions", "[]int32", "0+"),
        ]),
    ]),
])


_ACK_BATCH = [
    field("FirstOffset", "int64", "0+"),
    field("LastOffset", "int64", "0+"),
    field("AcknowledgeTypes", "[]int8", "0+"),
]

_LEADER = [
    field("LeaderId", "int32", "0+"),
    field("LeaderEpoch", "int32", "0+"),
]

_NODE_ENDPOINTS = field("NodeEndpoints", "[]NodeEndpoint", "0+", fields=[
    field("NodeId", "int32", "0+"),
    field("Host", "string", "0+"),
    field("Port", "int32", "0+"),
    field("Rack", "string", "0+", nullable="0+", default=None),
])


SHARE_FETCH_REQUEST = message("ShareFetchRequest", 78, "1-2", "0+", [
    field("GroupId", "string", "0+", nullable="0+", default=None),
    field("MemberId", "string", "0+", nullable="0+"),
    field("ShareSessionEpoch", "int32", "0+"),
    field("MaxWaitMs", "int32", "0+"),
    field("MinBytes", "int32", "0+"),
    field("MaxBytes", "int32", "0+", default=0x7FFFFFFF),
    field("MaxRecords", "int32", "1+"),
    field("BatchSize", "int32", "1+"),
    field("ShareAcquireMode", "int8", "2+"),
    field("IsRenewAck", "bool", "2+"),
    field("Topics", "[]FetchTopic", "0+", fields=[
        field("TopicId", "uuid", "0+"),
        field("Partitions", "[]FetchPartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("PartitionMaxBytes", "int32", "0"),
            field("AcknowledgementBatches", "[]AcknowledgementBatch", "0+", fields=_ACK_BATCH),
        ]),
    ]),
    field("ForgottenTopicsData", "[]ForgottenTopic", "0+", fields=[
        field("TopicId", "uuid", "0+"),
        field("Partitions", "[]int32", "0+"),
    ]),
])


SHARE_FETCH_RESPONSE = message("ShareFetchResponse", 78, "1-2", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    field("AcquisitionLockTimeoutMs", "int32", "1+"),
    field("Responses", "[]ShareFetchableTopicResponse", "0+", fields=[
        field("TopicId", "uuid", "0+"),
        field("Partitions", "[]PartitionData", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            field("AcknowledgeErrorCode", "int16", "0+"),
            field("AcknowledgeErrorMessage", "string", "0+", nullable="0+", default=None),
            field("CurrentLeader", "LeaderIdAndEpoch", "0+", fields=_LEADER),
            field("Records", "records", "0+", nullable="0+"),
            field("AcquiredRecords", "[]AcquiredRecords", "0+", fields=[
                field("FirstOffset", "int64", "0+"),
                field("LastOffset", "int64", "0+"),
                field("DeliveryCount", "int16", "0+"),
            ]),
        ]),
    ]),
    _NODE_ENDPOINTS,
])


SHARE_ACKNOWLEDGE_REQUEST = message("ShareAcknowledgeRequest", 79, "1-2", "0+", [
    field("GroupId", "string", "0+", nullable="0+", default=None),
    field("MemberId", "string", "0+", nullable="0+"),
    field("ShareSessionEpoch", "int32", "0+"),
    field("IsRenewAck", "bool", "2+"),
    field("Topics", "[]AcknowledgeTopic", "0+", fields=[
        field("TopicId", "uuid", "0+"),
        field("Partitions", "[]AcknowledgePartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("AcknowledgementBatches", "[]AcknowledgementBatch", "0+", fields=_ACK_BATCH),
        ]),
    ]),
])


SHARE_ACKNOWLEDGE_RESPONSE = message("ShareAcknowledgeResponse", 79, "1-2", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    field("AcquisitionLockTimeoutMs", "int32", "2+"),
    field("Responses", "[]ShareAcknowledgeTopicResponse", "0+", fields=[
        field("TopicId", "uuid", "0+"),
        field("Partitions", "[]PartitionData", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            field("CurrentLeader", "LeaderIdAndEpoch", "0+", fields=_LEADER),
        ]),
    ]),
    _NODE_ENDPOINTS,
])

APIS = [
    (SHARE_GROUP_HEARTBEAT_REQUEST, SHARE_GROUP_HEARTBEAT_RESPONSE),
    (SHARE_FETCH_REQUEST, SHARE_FETCH_RESPONSE),
    (SHARE_ACKNOWLEDGE_REQUEST, SHARE_ACKNOWLEDGE_RESPONSE),
]


SHARE_GROUP_DESCRIBE_REQUEST = message("ShareGroupDescribeRequest", 77, "1", "0+", [
    field("GroupIds", "[]string", "0+"),
    field("IncludeAuthorizedOperations", "bool", "0+"),
])


SHARE_GROUP_DESCRIBE_RESPONSE = message("ShareGroupDescribeResponse", 77, "1", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Groups", "[]DescribedGroup", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        field("GroupId", "string", "0+"),
        field("GroupState", "string", "0+"),
        field("GroupEpoch", "int32", "0+"),
        field("AssignmentEpoch", "int32", "0+"),
        field("AssignorName", "string", "0+"),
        field("Members", "[]Member", "0+", fields=[
            field("MemberId", "string", "0+"),
            field("RackId", "string", "0+", nullable="0+", default=None),
            field("MemberEpoch", "int32", "0+"),
            field("ClientId", "string", "0+"),
            field("ClientHost", "string", "0+"),
            field("SubscribedTopicNames", "[]string", "0+"),
            field("Assignment", "Assignment", "0+", fields=[
                field("TopicPartitions", "[]TopicPartitions", "0+", fields=[
                    field("TopicId", "uuid", "0+"),
                    field("TopicName", "string", "0+"),
                    field("Partitions", "[]int32", "0+"),
                ]),
            ]),
        ]),
        field("AuthorizedOperations", "int32", "0+", default=-2147483648),
    ]),
])

APIS.append((SHARE_GROUP_DESCRIBE_REQUEST, SHARE_GROUP_DESCRIBE_RESPONSE))


DESCRIBE_SHARE_GROUP_OFFSETS_REQUEST = message("DescribeShareGroupOffsetsRequest", 90, "0", "0+", [
    field("Groups", "[]DescribeShareGroupOffsetsRequestGroup", "0+", fields=[
        field("GroupId", "string", "0+"),
        field("Topics", "[]DescribeShareGroupOffsetsRequestTopic", "0+", nullable="0+", fields=[
            field("TopicName", "string", "0+"),
            field("Partitions", "[]int32", "0+"),
        ]),
    ]),
])


DESCRIBE_SHARE_GROUP_OFFSETS_RESPONSE = message("DescribeShareGroupOffsetsResponse", 90, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Groups", "[]DescribeShareGroupOffsetsResponseGroup", "0+", fields=[
        field("GroupId", "string", "0+"),
        field("Topics", "[]DescribeShareGroupOffsetsResponseTopic", "0+", fields=[
            field("TopicName", "string", "0+"),
            field("TopicId", "uuid", "0+"),
            field("Partitions", "[]DescribeShareGroupOffsetsResponsePartition", "0+", fields=[
                field("PartitionIndex", "int32", "0+"),
                field("StartOffset", "int64", "0+"),
                field("LeaderEpoch", "int32", "0+"),
                field("ErrorCode", "int16", "0+"),
                field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            ]),
        ]),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])

APIS.append((DESCRIBE_SHARE_GROUP_OFFSETS_REQUEST, DESCRIBE_SHARE_GROUP_OFFSETS_RESPONSE))


ALTER_SHARE_GROUP_OFFSETS_REQUEST = message("AlterShareGroupOffsetsRequest", 91, "0", "0+", [
    field("GroupId", "string", "0+"),
    field("Topics", "[]AlterShareGroupOffsetsRequestTopic", "0+", fields=[
        field("TopicName", "string", "0+"),
        field("Partitions", "[]AlterShareGroupOffsetsRequestPartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("StartOffset", "int64", "0+"),
        ]),
    ]),
])


ALTER_SHARE_GROUP_OFFSETS_RESPONSE = message("AlterShareGroupOffsetsResponse", 91, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    field("Responses", "[]AlterShareGroupOffsetsResponseTopic", "0+", fields=[
        field("TopicName", "string", "0+"),
        field("TopicId", "uuid", "0+"),
        field("Partitions", "[]AlterShareGroupOffsetsResponsePartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
])

APIS.append((ALTER_SHARE_GROUP_OFFSETS_REQUEST, ALTER_SHARE_GROUP_OFFSETS_RESPONSE))


DELETE_SHARE_GROUP_OFFSETS_REQUEST = message("DeleteShareGroupOffsetsRequest", 92, "0", "0+", [
    field("GroupId", "string", "0+"),
    field("Topics", "[]DeleteShareGroupOffsetsRequestTopic", "0+", fields=[
        field("TopicName", "string", "0+"),
    ]),
])


DELETE_SHARE_GROUP_OFFSETS_RESPONSE = message("DeleteShareGroupOffsetsResponse", 92, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    field("Responses", "[]DeleteShareGroupOffsetsResponseTopic", "0+", fields=[
        field("TopicName", "string", "0+"),
        field("TopicId", "uuid", "0+"),
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    ]),
])

APIS.append((DELETE_SHARE_GROUP_OFFSETS_REQUEST, DELETE_SHARE_GROUP_OFFSETS_RESPONSE))


# -- a share group's records in __consumer_offsets -----------------------------------------------------------
# The key's int16 version tells the record type: 10 a member, 11 the group, 15 the topics with share state.

SHARE_GROUP_MEMBER_METADATA_KEY = message("ShareGroupMemberMetadataKey", None, "10", "none", [
    field("GroupId", "string", "10"),
    field("MemberId", "string", "10"),
])

SHARE_GROUP_MEMBER_METADATA_VALUE = message("ShareGroupMemberMetadataValue", None, "0", "0+", [
    field("RackId", "string", "0+", nullable="0+"),
    field("ClientId", "string", "0+"),
    field("ClientHost", "string", "0+"),
    field("SubscribedTopicNames", "[]string", "0+"),
])

SHARE_GROUP_METADATA_KEY = message("ShareGroupMetadataKey", None, "11", "none", [
    field("GroupId", "string", "11"),
])

SHARE_GROUP_METADATA_VALUE = message("ShareGroupMetadataValue", None, "0", "0+", [
    field("Epoch", "int32", "0+"),
])

SHARE_GROUP_STATE_PARTITION_METADATA_KEY = message("ShareGroupStatePartitionMetadataKey", None, "15", "none", [
    field("GroupId", "string", "15"),
])

SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = message("ShareGroupStatePartitionMetadataValue", None, "0", "0+", [
    field("InitializedTopics", "[]TopicPartitionsInfo", "0+", fields=[
        field("TopicId", "uuid", "0+"),
        field("TopicName", "string", "0+"),
        field("Partitions", "[]int32", "0+"),
    ]),
    field("DeletingTopics", "[]TopicInfo", "0+", fields=[
        field("TopicId", "uuid", "0+"),
        field("TopicName", "string", "0+"),
    ]),
])

DATA = [SHARE_GROUP_MEMBER_METADATA_KEY, SHARE_GROUP_MEMBER_METADATA_VALUE, SHARE_GROUP_METADATA_KEY,
        SHARE_GROUP_METADATA_VALUE, SHARE_GROUP_STATE_PARTITION_METADATA_KEY,
        SHARE_GROUP_STATE_PARTITION_METADATA_VALUE]  # fmt: skip
