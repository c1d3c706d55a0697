"""Produce (0) and InitProducerId (22)."""

from __future__ import annotations

from rill.protocol.schema import field, message

PRODUCE_REQUEST = message("ProduceRequest", 0, "0-13", "9+", [
    field("TransactionalId", "string", "3+", nullable="3+", default=None),
    field("Acks", "int16", "0+"),
    field("TimeoutMs", "int32", "0+"),
    field("TopicData", "[]TopicProduceData", "0+", fields=[
        field("Name", "string", "0-12"),
        field("TopicId", "uuid", "13+"),
        field("PartitionData", "[]PartitionProduceData", "0+", fields=[
            field("Index", "int32", "0+"),
            field("Records", "records", "0+", nullable="0+"),
        ]),
    ]),
])


PRODUCE_RESPONSE = message("ProduceResponse", 0, "0-13", "9+", [
    field("Responses", "[]TopicProduceResponse", "0+", fields=[
        field("Name", "string", "0-12"),
        field("TopicId", "uuid", "13+"),
        field("PartitionResponses", "[]PartitionProduceResponse", "0+", fields=[
            field("Index", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
            field("BaseOffset", "int64", "0+"),
            field("LogAppendTimeMs", "int64", "2+", default=-1),
            field("LogStartOffset", "int64", "5+", default=-1),
            field("RecordErrors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                field("BatchIndex", "int32", "8+"),
                field("BatchIndexErrorMessage", "string", "8+", nullable="8+", default=None),
            ]),
            field("ErrorMessage", "string", "8+", nullable="8+", default=None),
            field("CurrentLeader", "LeaderIdAndEpoch", "10+", tag=0, fields=[
                field("LeaderId", "int32", "10+", default=-1),
                field("LeaderEpoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    field("ThrottleTimeMs", "int32", "1+", default=0),
    field("NodeEndpoints", "[]NodeEndpoint", "10+", tag=0, fields=[
        field("NodeId", "int32", "10+"),
        field("Host", "string", "10+"),
        field("Port", "int32", "10+"),
        field("Rack", "string", "10+", nullable="10+", default=None),
    ]),
])


INIT_PRODUCER_ID_REQUEST = message("InitProducerIdRequest", 22, "0-6", "2+", [
    field("TransactionalId", "string", "0+", nullable="0+"),
    field("TransactionTimeoutMs", "int32", "0+"),
    field("ProducerId", "int64", "3+", default=-1),
    field("ProducerEpoch", "int16", "3+", default=-1),
    field("Enable2Pc", "bool", "6+", default=False),
    field("KeepPreparedTxn", "bool", "6+", default=False),
])


INIT_PRODUCER_ID_RESPONSE = message("InitProducerIdResponse", 22, "0-6", "2+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ProducerId", "int64", "0+", default=-1),
    field("ProducerEpoch", "int16", "0+"),
    field("OngoingTxnProducerId", "int64", "6+", default=-1),
    field("OngoingTxnProducerEpoch", "int16", "6+", default=-1),
])

APIS = [
    (PRODUCE_REQUEST, PRODUCE_RESPONSE),
    (INIT_PRODUCER_ID_REQUEST, INIT_PRODUCER_ID_RESPONSE),
]
