"""WriteTxnMarkers (27) and DescribeProducers (61): the partition side of transactions."""

from __future__ import annotations

from rill.protocol.schema import field, message

WRITE_TXN_MARKERS_REQUEST = message("WriteTxnMarkersRequest", 27, "0-1", "1+", [
    field("Markers", "[]WritableTxnMarker", "0+", fields=[
        field("ProducerId", "int64", "0+"),
        field("ProducerEpoch", "int16", "0+"),
        field("TransactionResult", "bool", "0+"),
        field("Topics", "[]WritableTxnMarkerTopic", "0+", fields=[
            field("Name", "string", "0+"),
            field("PartitionIndexes", "[]int32", "0+"),
        ]),
        field("CoordinatorEpoch", "int32", "0+"),
    ]),
])

WRITE_TXN_MARKERS_RESPONSE = message("WriteTxnMarkersResponse", 27, "0-1", "1+", [
    field("Markers", "[]WritableTxnMarkerResult", "0+", fields=[
        field("ProducerId", "int64", "0+"),
        field("Topics", "[]WritableTxnMarkerTopicResult", "0+", fields=[
            field("Name", "string", "0+"),
            field("Partitions", "[]WritableTxnMarkerPartitionResult", "0+", fields=[
                field("PartitionIndex", "int32", "0+"),
                field("ErrorCode", "int16", "0+"),
            ]),
        ]),
    ]),
])

DESCRIBE_PRODUCERS_REQUEST = message("DescribeProducersRequest", 61, "0", "0+", [
    field("Topics", "[]TopicRequest", "0+", fields=[
        field("Name", "string", "0+"),
        field("PartitionIndexes", "[]int32", "0+"),
    ]),
])

DESCRIBE_PRODUCERS_RESPONSE = message("DescribeProducersResponse", 61, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Topics", "[]TopicResponse", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]PartitionResponse", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            field("ActiveProducers", "[]ProducerState", "0+", fields=[
                field("ProducerId", "int64", "0+"),
                field("ProducerEpoch", "int32", "0+"),
                field("LastSequence", "int32", "0+", default=-1),
                field("LastTimestamp", "int64", "0+", default=-1),
                field("CoordinatorEpoch", "int32", "0+"),
                field("CurrentTxnStartOffset", "int64", "0+", default=-1),
            ]),
        ]),
    ]),
])

APIS = [
    (WRITE_TXN_MARKERS_REQUEST, WRITE_TXN_MARKERS_RESPONSE),
    (DESCRIBE_PRODUCERS_REQUEST, DESCRIBE_PRODUCERS_RESPONSE),
]
