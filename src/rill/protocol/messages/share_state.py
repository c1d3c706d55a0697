"""The share coordinator's inter-broker APIs (KIP-932): InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86), ReadShareGroupStateSummary (87); and the records it keeps
in ``__share_group_state`` (ShareSnapshot, key version 0; ShareUpdate, key version 1)."""

from __future__ import annotations

from rill.protocol.schema import Field, Message, field, message

_RESULT = [
    field("Partition", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ErrorMessage", "string", "0+", nullable="0+", default=None),
]


def _state_batches() -> Field:
    return field("StateBatches", "[]StateBatch", "0+", fields=[
        field("FirstOffset", "int64", "0+"),
        field("LastOffset", "int64", "0+"),
        field("DeliveryState", "int8", "0+"),
        field("DeliveryCount", "int16", "0+"),
    ])


def _request(name: str, api_key: int, data: str, partition_fields: list[Field]) -> Message:
    return message(f"{name}Request", api_key, "0", "0+", [
        field("GroupId", "string", "0+"),
        field("Topics", f"[]{data}Data", "0+", fields=[
            field("TopicId", "uuid", "0+"),
            field("Partitions", "[]PartitionData", "0+", fields=[field("Partition", "int32", "0+"), *partition_fields]),
        ]),
    ])


def _response(name: str, api_key: int, data: str, result_fields: list[Field]) -> Message:
    return message(f"{name}Response", api_key, "0", "0+", [
        field("Results", f"[]{data}Result", "0+", fields=[
            field("TopicId", "uuid", "0+"),
            field("Partitions", "[]PartitionResult", "0+", fields=[*_RESULT, *result_fields]),
        ]),
    ])


INITIALIZE_SHARE_GROUP_STATE_REQUEST = _request("InitializeShareGroupState", 83, "InitializeState", [
    field("StateEpoch", "int32", "0+"),
    field("StartOffset", "int64", "0+"),
])
INITIALIZE_SHARE_GROUP_STATE_RESPONSE = _response("InitializeShareGroupState", 83, "InitializeState", [])

READ_SHARE_GROUP_STATE_REQUEST = _request("ReadShareGroupState", 84, "ReadState", [field("LeaderEpoch", "int32", "0+")])
READ_SHARE_GROUP_STATE_RESPONSE = _response("ReadShareGroupState", 84, "ReadState", [
    field("StateEpoch", "int32", "0+"),
    field("StartOffset", "int64", "0+"),
    _state_batches(),
])

WRITE_SHARE_GROUP_STATE_REQUEST = _request("WriteShareGroupState", 85, "WriteState", [
    field("StateEpoch", "int32", "0+"),
    field("LeaderEpoch", "int32", "0+"),
    field("StartOffset", "int64", "0+"),
    _state_batches(),
])
WRITE_SHARE_GROUP_STATE_RESPONSE = _response("WriteShareGroupState", 85, "WriteState", [])

DELETE_SHARE_GROUP_STATE_REQUEST = _request("DeleteShareGroupState", 86, "DeleteState", [])
DELETE_SHARE_GROUP_STATE_RESPONSE = _response("DeleteShareGroupState", 86, "DeleteState", [])

READ_SHARE_GROUP_STATE_SUMMARY_REQUEST = _request("ReadShareGroupStateSummary", 87, "ReadStateSummary",
                                                  [field("LeaderEpoch", "int32", "0+")])  # fmt: skip
READ_SHARE_GROUP_STATE_SUMMARY_RESPONSE = _response("ReadShareGroupStateSummary", 87, "ReadStateSummary", [
    field("StateEpoch", "int32", "0+"),
    field("StartOffset", "int64", "0+"),
])

APIS = [
    (INITIALIZE_SHARE_GROUP_STATE_REQUEST, INITIALIZE_SHARE_GROUP_STATE_RESPONSE),
    (READ_SHARE_GROUP_STATE_REQUEST, READ_SHARE_GROUP_STATE_RESPONSE),
    (WRITE_SHARE_GROUP_STATE_REQUEST, WRITE_SHARE_GROUP_STATE_RESPONSE),
    (DELETE_SHARE_GROUP_STATE_REQUEST, DELETE_SHARE_GROUP_STATE_RESPONSE),
    (READ_SHARE_GROUP_STATE_SUMMARY_REQUEST, READ_SHARE_GROUP_STATE_SUMMARY_RESPONSE),
]


# -- records in __share_group_state ------------------------------------------------------------------------
# The key's int16 version tells the record type: 0 ShareSnapshot, 1 ShareUpdate.

SHARE_SNAPSHOT_KEY = message("ShareSnapshotKey", None, "0", "none", [
    field("GroupId", "string", "0"),
    field("TopicId", "uuid", "0"),
    field("Partition", "int32", "0"),
])

SHARE_UPDATE_KEY = message("ShareUpdateKey", None, "1", "none", [
    field("GroupId", "string", "1"),
    field("TopicId", "uuid", "1"),
    field("Partition", "int32", "1"),
])

SHARE_SNAPSHOT_VALUE = message("ShareSnapshotValue", None, "0", "0+", [
    field("SnapshotEpoch", "int32", "0+"),
    field("StateEpoch", "int32", "0+"),
    field("LeaderEpoch", "int32", "0+"),
    field("StartOffset", "int64", "0+"),
    field("CreateTimestamp", "int64", "0+", default=-1),
    field("WriteTimestamp", "int64", "0+", default=-1),
    _state_batches(),
])

SHARE_UPDATE_VALUE = message("ShareUpdateValue", None, "0", "0+", [
    field("SnapshotEpoch", "int32", "0+"),
    field("LeaderEpoch", "int32", "0+"),
    field("StartOffset", "int64", "0+"),
    field("DeliveryCompleteCount", "int32", "0+", tag=0, default=-1),
    _state_batches(),
])

DATA = [SHARE_SNAPSHOT_KEY, SHARE_UPDATE_KEY, SHARE_SNAPSHOT_VALUE, SHARE_UPDATE_VALUE]
