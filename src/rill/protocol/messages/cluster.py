"""Replication control between brokers and the controller (the ZooKeeper-era design).

From the controller to brokers: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6). From brokers to the
controller: ControlledShutdown (7), AlterPartition (56). Admin requests the controller answers:
ElectLeaders (43), AlterPartitionReassignments (45), ListPartitionReassignments (46).

These are declared for the codec only; no handler is registered, so ApiVersions does not advertise them.
"""

from __future__ import annotations

from rill.protocol.schema import Field, field, message


def _leader_and_isr_partition_state() -> list[Field]:
    """LeaderAndIsrPartitionState: ungrouped in v0-1 (with the topic name), per topic from v2."""
    return [
        field("TopicName", "string", "0-1"),
        field("PartitionIndex", "int32", "0+"),
        field("ControllerEpoch", "int32", "0+"),
        field("Leader", "int32", "0+"),
        field("LeaderEpoch", "int32", "0+"),
        field("Isr", "[]int32", "0+"),
        field("PartitionEpoch", "int32", "0+"),
        field("Replicas", "[]int32", "0+"),
        field("AddingReplicas", "[]int32", "3+"),
        field("RemovingReplicas", "[]int32", "3+"),
        field("IsNew", "bool", "1+", default=False),
        field("LeaderRecoveryState", "int8", "6+", default=0),
    ]


LEADER_AND_ISR_REQUEST = message("LeaderAndIsrRequest", 4, "0-7", "4+", [
    field("ControllerId", "int32", "0+"),
    field("isKRaftController", "bool", "7+", default=False),
    field("ControllerEpoch", "int32", "0+"),
    field("BrokerEpoch", "int64", "2+", default=-1),
    field("Type", "int8", "5+"),
    field("UngroupedPartitionStates", "[]LeaderAndIsrPartitionState", "0-1",
          fields=_leader_and_isr_partition_state()),
    field("TopicStates", "[]LeaderAndIsrTopicState", "2+", fields=[
        field("TopicName", "string", "2+"),
        field("TopicId", "uuid", "5+"),
        field("PartitionStates", "[]LeaderAndIsrPartitionState", "2+",
              fields=_leader_and_isr_partition_state()),
    ]),
    field("LiveLeaders", "[]LeaderAndIsrLiveLeader", "0+", fields=[
        field("BrokerId", "int32", "0+"),
        field("HostName", "string", "0+"),
        field("Port", "int32", "0+"),
    ]),
])


def _leader_and_isr_partition_error() -> list[Field]:
    return [
        field("TopicName", "string", "0-4"),
        field("PartitionIndex", "int32", "0+"),
        field("ErrorCode", "int16", "0+"),
    ]


LEADER_AND_ISR_RESPONSE = message("LeaderAndIsrResponse", 4, "0-7", "4+", [
    field("ErrorCode", "int16", "0+"),
    field("PartitionErrors", "[]LeaderAndIsrPartitionError", "0-4", fields=_leader_and_isr_partition_error()),
    field("Topics", "[]LeaderAndIsrTopicError", "5+", fields=[
        field("TopicId", "uuid", "5+"),
        field("PartitionErrors", "[]LeaderAndIsrPartitionError", "5+", fields=_leader_and_isr_partition_error()),
    ]),
])


STOP_REPLICA_REQUEST = message("StopReplicaRequest", 5, "0-4", "2+", [
    field("ControllerId", "int32", "0+"),
    field("isKRaftController", "bool", "4+", default=False),
    field("ControllerEpoch", "int32", "0+"),
    field("BrokerEpoch", "int64", "1+", default=-1),
    field("DeletePartitions", "bool", "0-2"),
    field("UngroupedPartitions", "[]StopReplicaPartitionV0", "0", fields=[
        field("TopicName", "string", "0"),
        field("PartitionIndex", "int32", "0"),
    ]),
    field("Topics", "[]StopReplicaTopicV1", "1-2", fields=[
        field("Name", "string", "1-2"),
        field("PartitionIndexes", "[]int32", "1-2"),
    ]),
    field("TopicStates", "[]StopReplicaTopicState", "3+", fields=[
        field("TopicName", "string", "3+"),
        field("PartitionStates", "[]StopReplicaPartitionState", "3+", fields=[
            field("PartitionIndex", "int32", "3+"),
            field("LeaderEpoch", "int32", "3+", default=-1),
            field("DeletePartition", "bool", "3+"),
        ]),
    ]),
])


STOP_REPLICA_RESPONSE = message("StopReplicaResponse", 5, "0-4", "2+", [
    field("ErrorCode", "int16", "0+"),
    field("PartitionErrors", "[]StopReplicaPartitionError", "0+", fields=[
        field("TopicName", "string", "0+"),
        field("PartitionIndex", "int32", "0+"),
        field("ErrorCode", "int16", "0+"),
    ]),
])


def _update_metadata_partition_state() -> list[Field]:
    """UpdateMetadataPartitionState: ungrouped in v0-4 (with the topic name), per topic from v5."""
    return [
        field("TopicName", "string", "0-4"),
        field("PartitionIndex", "int32", "0+"),
        field("ControllerEpoch", "int32", "0+"),
        field("Leader", "int32", "0+"),
        field("LeaderEpoch", "int32", "0+"),
        field("Isr", "[]int32", "0+"),
        field("ZkVersion", "int32", "0+"),
        field("Replicas", "[]int32", "0+"),
        field("OfflineReplicas", "[]int32", "4+"),
    ]


UPDATE_METADATA_REQUEST = message("UpdateMetadataRequest", 6, "0-8", "6+", [
    field("ControllerId", "int32", "0+"),
    field("isKRaftController", "bool", "8+", default=False),
    field("Type", "int8", "8+", tag=0, default=0),
    field("ControllerEpoch", "int32", "0+"),
    field("BrokerEpoch", "int64", "5+", default=-1),
    field("UngroupedPartitionStates", "[]UpdateMetadataPartitionState", "0-4",
          fields=_update_metadata_partition_state()),
    field("TopicStates", "[]UpdateMetadataTopicState", "5+", fields=[
        field("TopicName", "string", "5+"),
        field("TopicId", "uuid", "7+"),
        field("PartitionStates", "[]UpdateMetadataPartitionState", "5+",
              fields=_update_metadata_partition_state()),
    ]),
    field("LiveBrokers", "[]UpdateMetadataBroker", "0+", fields=[
        field("Id", "int32", "0+"),
        field("V0Host", "string", "0"),
        field("V0Port", "int32", "0"),
        field("Endpoints", "[]UpdateMetadataEndpoint", "1+", fields=[
            field("Port", "int32", "1+"),
            field("Host", "string", "1+"),
            field("Listener", "string", "3+"),
            field("SecurityProtocol", "int16", "1+"),
        ]),
        field("Rack", "string", "2+", nullable="0+"),
    ]),
])


UPDATE_METADATA_RESPONSE = message("UpdateMetadataResponse", 6, "0-8", "6+", [
    field("ErrorCode", "int16", "0+"),
])


CONTROLLED_SHUTDOWN_REQUEST = message("ControlledShutdownRequest", 7, "0-3", "3+", [
    field("BrokerId", "int32", "0+"),
    field("BrokerEpoch", "int64", "2+", default=-1),
])


CONTROLLED_SHUTDOWN_RESPONSE = message("ControlledShutdownResponse", 7, "0-3", "3+", [
    field("ErrorCode", "int16", "0+"),
    field("RemainingPartitions", "[]RemainingPartition", "0+", fields=[
        field("TopicName", "string", "0+"),
        field("PartitionIndex", "int32", "0+"),
    ]),
])


ALTER_PARTITION_REQUEST = message("AlterPartitionRequest", 56, "0-3", "0+", [
    field("BrokerId", "int32", "0+"),
    field("BrokerEpoch", "int64", "0+", default=-1),
    field("Topics", "[]TopicData", "0+", fields=[
        field("TopicName", "string", "0-1"),
        field("TopicId", "uuid", "2+"),
        field("Partitions", "[]PartitionData", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("LeaderEpoch", "int32", "0+"),
            field("NewIsr", "[]int32", "0-2"),
            field("NewIsrWithEpochs", "[]BrokerState", "3+", fields=[
                field("BrokerId", "int32", "3+"),
                field("BrokerEpoch", "int64", "3+", default=-1),
            ]),
            field("LeaderRecoveryState", "int8", "1+", default=0),
            field("PartitionEpoch", "int32", "0+"),
        ]),
    ]),
])


ALTER_PARTITION_RESPONSE = message("AlterPartitionResponse", 56, "0-3", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("Topics", "[]TopicData", "0+", fields=[
        field("TopicName", "string", "0-1"),
        field("TopicId", "uuid", "2+"),
        field("Partitions", "[]PartitionData", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("LeaderId", "int32", "0+"),
            field("LeaderEpoch", "int32", "0+"),
            field("Isr", "[]int32", "0+"),
            field("LeaderRecoveryState", "int8", "1+", default=0),
            field("PartitionEpoch", "int32", "0+"),
        ]),
    ]),
])


ELECT_LEADERS_REQUEST = message("ElectLeadersRequest", 43, "0-2", "2+", [
    field("ElectionType", "int8", "1+"),
    field("TopicPartitions", "[]TopicPartitions", "0+", nullable="0+", fields=[
        field("Topic", "string", "0+"),
        field("Partitions", "[]int32", "0+"),
    ]),
    field("TimeoutMs", "int32", "0+", default=60000),
])


ELECT_LEADERS_RESPONSE = message("ElectLeadersResponse", 43, "0-2", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "1+"),
    field("ReplicaElectionResults", "[]ReplicaElectionResult", "0+", fields=[
        field("Topic", "string", "0+"),
        field("PartitionResult", "[]PartitionResult", "0+", fields=[
            field("PartitionId", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("ErrorMessage", "string", "0+", nullable="0+"),
        ]),
    ]),
])


ALTER_PARTITION_REASSIGNMENTS_REQUEST = message("AlterPartitionReassignmentsRequest", 45, "0", "0+", [
    field("TimeoutMs", "int32", "0+", default=60000),
    field("Topics", "[]ReassignableTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]ReassignablePartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("Replicas", "[]int32", "0+", nullable="0+", default=None),
        ]),
    ]),
])


ALTER_PARTITION_REASSIGNMENTS_RESPONSE = message("AlterPartitionReassignmentsResponse", 45, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+"),
    field("Responses", "[]ReassignableTopicResponse", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]ReassignablePartitionResponse", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("ErrorMessage", "string", "0+", nullable="0+"),
        ]),
    ]),
])


LIST_PARTITION_REASSIGNMENTS_REQUEST = message("ListPartitionReassignmentsRequest", 46, "0", "0+", [
    field("TimeoutMs", "int32", "0+", default=60000),
    field("Topics", "[]ListPartitionReassignmentsTopics", "0+", nullable="0+", default=None, fields=[
        field("Name", "string", "0+"),
        field("PartitionIndexes", "[]int32", "0+"),
    ]),
])


LIST_PARTITION_REASSIGNMENTS_RESPONSE = message("ListPartitionReassignmentsResponse", 46, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+"),
    field("Topics", "[]OngoingTopicReassignment", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]OngoingPartitionReassignment", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("Replicas", "[]int32", "0+"),
            field("AddingReplicas", "[]int32", "0+"),
            field("RemovingReplicas", "[]int32", "0+"),
        ]),
    ]),
])

APIS = [
    (LEADER_AND_ISR_REQUEST, LEADER_AND_ISR_RESPONSE),
    (STOP_REPLICA_REQUEST, STOP_REPLICA_RESPONSE),
    (UPDATE_METADATA_REQUEST, UPDATE_METADATA_RESPONSE),
    (CONTROLLED_SHUTDOWN_REQUEST, CONTROLLED_SHUTDOWN_RESPONSE),
    (ALTER_PARTITION_REQUEST, ALTER_PARTITION_RESPONSE),
    (ELECT_LEADERS_REQUEST, ELECT_LEADERS_RESPONSE),
    (ALTER_PARTITION_REASSIGNMENTS_REQUEST, ALTER_PARTITION_REASSIGNMENTS_RESPONSE),
    (LIST_PARTITION_REASSIGNMENTS_REQUEST, LIST_PARTITION_REASSIGNMENTS_RESPONSE),
]
