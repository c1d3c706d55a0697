"""Group membership: FindCoordinator (10), JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13),
ListGroups (16), DescribeGroups (15), DeleteGroups (42)."""

from __future__ import annotations

from rill.protocol.schema import field, message

FIND_COORDINATOR_REQUEST = message("FindCoordinatorRequest", 10, "0-6", "3+", [
    field("Key", "string", "0-3"),
    field("KeyType", "int8", "1+", default=0),
    field("CoordinatorKeys", "[]string", "4+"),
])


FIND_COORDINATOR_RESPONSE = message("FindCoordinatorResponse", 10, "0-6", "3+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("ErrorCode", "int16", "0-3"),
    field("ErrorMessage", "string", "1-3", nullable="1-3"),
    field("NodeId", "int32", "0-3"),
    field("Host", "string", "0-3"),
    field("Port", "int32", "0-3"),
    field("Coordinators", "[]Coordinator", "4+", fields=[
        field("Key", "string", "4+"),
        field("NodeId", "int32", "4+"),
        field("Host", "string", "4+"),
        field("Port", "int32", "4+"),
        field("ErrorCode", "int16", "4+"),
        field("ErrorMessage", "string", "4+", nullable="4+"),
    ]),
])


JOIN_GROUP_REQUEST = message("JoinGroupRequest", 11, "0-9", "6+", [
    field("GroupId", "string", "0+"),
    field("SessionTimeoutMs", "int32", "0+"),
    field("RebalanceTimeoutMs", "int32", "1+", default=-1),
    field("MemberId", "string", "0+"),
    field("GroupInstanceId", "string", "5+", nullable="5+", default=None),
    field("ProtocolType", "string", "0+"),
    field("Protocols", "[]JoinGroupRequestProtocol", "0+", fields=[
        field("Name", "string", "0+"),
        field("Metadata", "bytes", "0+"),
    ]),
    field("Reason", "string", "8+", nullable="8+", default=None),
])


JOIN_GROUP_RESPONSE = message("JoinGroupResponse", 11, "0-9", "6+", [
    field("ThrottleTimeMs", "int32", "2+"),
    field("ErrorCode", "int16", "0+"),
    field("GenerationId", "int32", "0+", default=-1),
    field("ProtocolType", "string", "7+", nullable="7+", default=None),
    field("ProtocolName", "string", "0+", nullable="7+"),
    field("Leader", "string", "0+"),
    field("SkipAssignment", "bool", "9+", default=False),
    field("MemberId", "string", "0+"),
    field("Members", "[]JoinGroupResponseMember", "0+", fields=[
        field("MemberId", "string", "0+"),
        field("GroupInstanceId", "string", "5+", nullable="5+", default=None),
        field("Metadata", "bytes", "0+"),
    ]),
])


SYNC_GROUP_REQUEST = message("SyncGroupRequest", 14, "0-5", "4+", [
    field("GroupId", "string", "0+"),
    field("GenerationId", "int32", "0+"),
    field("MemberId", "string", "0+"),
    field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    field("ProtocolType", "string", "5+", nullable="5+", default=None),
    field("ProtocolName", "string", "5+", nullable="5+", default=None),
    field("Assignments", "[]SyncGroupRequestAssignment", "0+", fields=[
        field("MemberId", "string", "0+"),
        field("Assignment", "bytes", "0+"),
    ]),
])


SYNC_GROUP_RESPONSE = message("SyncGroupResponse", 14, "0-5", "4+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("ErrorCode", "int16", "0+"),
    field("ProtocolType", "string", "5+", nullable="5+", default=None),
    field("ProtocolName", "string", "5+", nullable="5+", default=None),
    field("Assignment", "bytes", "0+"),
])


HEARTBEAT_REQUEST = message("HeartbeatRequest", 12, "0-4", "4+", [
    field("GroupId", "string", "0+"),
    field("GenerationId", "int32", "0+"),
    field("MemberId", "string", "0+"),
    field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
])


HEARTBEAT_RESPONSE = message("HeartbeatResponse", 12, "0-4", "4+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("ErrorCode", "int16", "0+"),
])


LEAVE_GROUP_REQUEST = message("LeaveGroupRequest", 13, "0-5", "4+", [
    field("GroupId", "string", "0+"),
    field("MemberId", "string", "0-2"),
    field("Members", "[]MemberIdentity", "3+", fields=[
        field("MemberId", "string", "3+"),
        field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
        field("Reason", "string", "5+", nullable="5+", default=None),
    ]),
])


LEAVE_GROUP_RESPONSE = message("LeaveGroupResponse", 13, "0-5", "4+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("ErrorCode", "int16", "0+"),
    field("Members", "[]MemberResponse", "3+", fields=[
        field("MemberId", "string", "3+"),
        field("GroupInstanceId", "string", "3+", nullable="3+"),
        field("ErrorCode", "int16", "3+"),
    ]),
])


LIST_GROUPS_REQUEST = message("ListGroupsRequest", 16, "0-5", "3+", [
    field("StatesFilter", "[]string", "4+"),
    field("TypesFilter", "[]string", "5+"),
])


LIST_GROUPS_RESPONSE = message("ListGroupsResponse", 16, "0-5", "3+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("ErrorCode", "int16", "0+"),
    field("Groups", "[]ListedGroup", "0+", fields=[
        field("GroupId", "string", "0+"),
        field("ProtocolType", "string", "0+"),
        field("GroupState", "string", "4+"),
        field("GroupType", "string", "5+"),
    ]),
])


DESCRIBE_GROUPS_REQUEST = message("DescribeGroupsRequest", 15, "0-6", "5+", [
    field("Groups", "[]string", "0+"),
    field("IncludeAuthorizedOperations", "bool", "3+"),
])


DESCRIBE_GROUPS_RESPONSE = message("DescribeGroupsResponse", 15, "0-6", "5+", [
    field("ThrottleTimeMs", "int32", "1+"),
    field("Groups", "[]DescribedGroup", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("ErrorMessage", "string", "6+", nullable="6+", default=None),
        field("GroupId", "string", "0+"),
        field("GroupState", "string", "0+"),
        field("ProtocolType", "string", "0+"),
        field("ProtocolData", "string", "0+"),
        field("Members", "[]DescribedGroupMember", "0+", fields=[
            field("MemberId", "string", "0+"),
            field("GroupInstanceId", "string", "4+", nullable="4+", default=None),
            field("ClientId", "string", "0+"),
            field("ClientHost", "string", "0+"),
            field("MemberMetadata", "bytes", "0+"),
            field("MemberAssignment", "bytes", "0+"),
        ]),
        field("AuthorizedOperations", "int32", "3+", default=-2147483648),
    ]),
])


DELETE_GROUPS_REQUEST = message("DeleteGroupsRequest", 42, "0-2", "2+", [
    field("GroupsNames", "[]string", "0+"),
])


DELETE_GROUPS_RESPONSE = message("DeleteGroupsResponse", 42, "0-2", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Results", "[]DeletableGroupResult", "0+", fields=[
        field("GroupId", "string", "0+"),
        field("ErrorCode", "int16", "0+"),
    ]),
])

APIS = [
    (FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE),
    (JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE),
    (SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE),
    (HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE),
    (LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE),
    (LIST_GROUPS_REQUEST, LIST_GROUPS_RESPONSE),
    (DESCRIBE_GROUPS_REQUEST, DESCRIBE_GROUPS_RESPONSE),
    (DELETE_GROUPS_REQUEST, DELETE_GROUPS_RESPONSE),
]
