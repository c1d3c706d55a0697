"""The consumer group protocol of KIP-848: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), and the
records a consumer group keeps in ``__consumer_offsets`` (key versions 3 and 5-8)."""

from __future__ import annotations

from rill.protocol.schema import Field, field, message


def _topic_partitions(versions: str, *, with_name: bool = False) -> list[Field]:
    fields = [field("TopicId", "uuid", versions)]
    if with_name:
        fields.append(field("TopicName", "string", versions))
    fields.append(field("Partitions", "[]int32", versions))
    return fields


CONSUMER_GROUP_HEARTBEAT_REQUEST = message("ConsumerGroupHeartbeatRequest", 68, "0-1", "0+", [
    field("GroupId", "string", "0+"),
    field("MemberId", "string", "0+"),
    field("MemberEpoch", "int32", "0+"),
    field("InstanceId", "string", "0+", nullable="0+", default=None),
    field("RackId", "string", "0+", nullable="0+", default=None),
    field("RebalanceTimeoutMs", "int32", "0+", default=-1),
    field("SubscribedTopicNames", "[]string", "0+", nullable="0+", default=None),
    field("SubscribedTopicRegex", "string", "1+", nullable="1+", default=None),
    field("ServerAssignor", "string", "0+", nullable="0+", default=None),
    field("TopicPartitions", "[]TopicPartitions", "0+", nullable="0+", default=None,
          fields=_topic_partitions("0+")),
])


CONSUMER_GROUP_HEARTBEAT_RESPONSE = message("ConsumerGroupHeartbeatResponse", 68, "0-1", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
    field("MemberId", "string", "0+", nullable="0+", default=None),
    field("MemberEpoch", "int32", "0+"),
    field("HeartbeatIntervalMs", "int32", "0+"),
    field("Assignment", "Assignment", "0+", nullable="0+", default=None, fields=[
        field("TopicPartitions", "[]TopicPartitions", "0+", fields=_topic_partitions("0+")),
    ]),
])


def _described_assignment(name: str) -> Field:
    return field(name, "Assignment", "0+", fields=[
        field("TopicPartitions", "[]TopicPartitions", "0+", fields=_topic_partitions("0+", with_name=True)),
    ])


CONSUMER_GROUP_DESCRIBE_REQUEST = message("ConsumerGroupDescribeRequest", 69, "0-1", "0+", [
    field("GroupIds", "[]string", "0+"),
    field("IncludeAuthorizedOperations", "bool", "0+"),
])


CONSUMER_GROUP_DESCRIBE_RESPONSE = message("ConsumerGroupDescribeResponse", 69, "0-1", "0+", [
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
            field("InstanceId", "string", "0+", nullable="0+", default=None),
            field("RackId", "string", "0+", nullable="0+", default=None),
            field("MemberEpoch", "int32", "0+"),
            field("ClientId", "string", "0+"),
            field("ClientHost", "string", "0+"),
            field("SubscribedTopicNames", "[]string", "0+"),
            field("SubscribedTopicRegex", "string", "0+", nullable="0+", default=None),
            _described_assignment("Assignment"),
            _described_assignment("TargetAssignment"),
            field("MemberType", "int8", "1+", default=-1),  # KIP-1099: 0 classic, 1 consumer, -1 unknown
        ]),
        field("AuthorizedOperations", "int32", "0+", default=-2147483648),
    ]),
])

APIS = [
    (CONSUMER_GROUP_HEARTBEAT_REQUEST, CONSUMER_GROUP_HEARTBEAT_RESPONSE),
    (CONSUMER_GROUP_DESCRIBE_REQUEST, CONSUMER_GROUP_DESCRIBE_RESPONSE),
]


# -- records in __consumer_offsets -------------------------------------------------------------------------

CONSUMER_GROUP_METADATA_KEY = message("ConsumerGroupMetadataKey", None, "3", "none", [
    field("GroupId", "string", "3"),
])

CONSUMER_GROUP_METADATA_VALUE = message("ConsumerGroupMetadataValue", None, "0", "0+", [
    field("Epoch", "int32", "0+"),
])

CONSUMER_GROUP_MEMBER_METADATA_KEY = message("ConsumerGroupMemberMetadataKey", None, "5", "none", [
    field("GroupId", "string", "5"),
    field("MemberId", "string", "5"),
])

CONSUMER_GROUP_MEMBER_METADATA_VALUE = message("ConsumerGroupMemberMetadataValue", None, "0", "0+", [
    field("InstanceId", "string", "0+", nullable="0+"),
    field("RackId", "string", "0+", nullable="0+"),
    field("ClientId", "string", "0+"),
    field("ClientHost", "string", "0+"),
    field("SubscribedTopicNames", "[]string", "0+"),
    field("SubscribedTopicRegex", "string", "0+", nullable="0+"),
    field("RebalanceTimeoutMs", "int32", "0+", default=-1),
    field("ServerAssignor", "string", "0+", nullable="0+"),
    field("ClassicMemberMetadata", "ClassicMemberMetadata", "0+", nullable="0+", default=None, tag=0, fields=[
        field("SessionTimeoutMs", "int32", "0+"),
        field("SupportedProtocols", "[]ClassicProtocol", "0+", fields=[
            field("Name", "string", "0+"),
            field("Metadata", "bytes", "0+"),
        ]),
    ]),
])

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = message("ConsumerGroupTargetAssignmentMetadataKey", None, "6",
                                                        "none", [field("GroupId", "string", "6")])

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = message("ConsumerGroupTargetAssignmentMetadataValue", None, "0",
                                                          "0+", [field("AssignmentEpoch", "int32", "0+")])

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = message("ConsumerGroupTargetAssignmentMemberKey", None, "7", "none", [
    field("GroupId", "string", "7"),
    field("MemberId", "string", "7"),
])

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = message("ConsumerGroupTargetAssignmentMemberValue", None, "0",
                                                        "0+", [
    field("TopicPartitions", "[]TopicPartition", "0+", fields=_topic_partitions("0+")),
])

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = message("ConsumerGroupCurrentMemberAssignmentKey", None, "8",
                                                       "none", [
    field("GroupId", "string", "8"),
    field("MemberId", "string", "8"),
])

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = message("ConsumerGroupCurrentMemberAssignmentValue", None, "0",
                                                         "0+", [
    field("MemberEpoch", "int32", "0+"),
    field("PreviousMemberEpoch", "int32", "0+"),
    field("State", "int8", "0+"),
    field("AssignedPartitions", "[]TopicPartitions", "0+", fields=_topic_partitions("0+")),
    field("PartitionsPendingRevocation", "[]TopicPartitions", "0+", fields=_topic_partitions("0+")),
])

DATA = [
    CONSUMER_GROUP_METADATA_KEY,
    CONSUMER_GROUP_METADATA_VALUE,
    CONSUMER_GROUP_MEMBER_METADATA_KEY,
    CONSUMER_GROUP_MEMBER_METADATA_VALUE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
]
