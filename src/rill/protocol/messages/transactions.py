"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28),
DescribeTransactions (65), ListTransactions (66)."""

from __future__ import annotations

from rill.protocol.schema import field, message

ADD_PARTITIONS_TO_TXN_REQUEST = message("AddPartitionsToTxnRequest", 24, "0-5", "3+", [
    field("Transactions", "[]AddPartitionsToTxnTransaction", "4+", fields=[
        field("TransactionalId", "string", "4+"),
        field("ProducerId", "int64", "4+"),
        field("ProducerEpoch", "int16", "4+"),
        field("VerifyOnly", "bool", "4+", default=False),
        field("Topics", "[]AddPartitionsToTxnTopic", "4+", fields=[
            field("Name", "string", "0+"),
            field("Partitions", "[]int32", "0+"),
        ]),
    ]),
    field("V3AndBelowTransactionalId", "string", "0-3"),
    field("V3AndBelowProducerId", "int64", "0-3"),
    field("V3AndBelowProducerEpoch", "int16", "0-3"),
    field("V3AndBelowTopics", "[]AddPartitionsToTxnTopic", "0-3", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]int32", "0+"),
    ]),
])


ADD_PARTITIONS_TO_TXN_RESPONSE = message("AddPartitionsToTxnResponse", 24, "0-5", "3+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "4+"),
    field("ResultsByTransaction", "[]AddPartitionsToTxnResult", "4+", fields=[
        field("TransactionalId", "string", "4+"),
        field("TopicResults", "[]AddPartitionsToTxnTopicResult", "4+", fields=[
            field("Name", "string", "0+"),
            field("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=[
                field("PartitionIndex", "int32", "0+"),
                field("PartitionErrorCode", "int16", "0+"),
            ]),
        ]),
    ]),
    field("ResultsByTopicV3AndBelow", "[]AddPartitionsToTxnTopicResult", "0-3", fields=[
        field("Name", "string", "0+"),
        field("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("PartitionErrorCode", "int16", "0+"),
        ]),
    ]),
])


ADD_OFFSETS_TO_TXN_REQUEST = message("AddOffsetsToTxnRequest", 25, "0-4", "3+", [
    field("TransactionalId", "string", "0+"),
    field("ProducerId", "int64", "0+"),
    field("ProducerEpoch", "int16", "0+"),
    field("GroupId", "string", "0+"),
])


ADD_OFFSETS_TO_TXN_RESPONSE = message("AddOffsetsToTxnResponse", 25, "0-4", "3+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
])


END_TXN_REQUEST = message("EndTxnRequest", 26, "0-4", "3+", [
    field("TransactionalId", "string", "0+"),
    field("ProducerId", "int64", "0+"),
    field("ProducerEpoch", "int16", "0+"),
    field("Committed", "bool", "0+"),
])


END_TXN_RESPONSE = message("EndTxnResponse", 26, "0-4", "3+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
])


TXN_OFFSET_COMMIT_REQUEST = message("TxnOffsetCommitRequest", 28, "0-4", "3+", [
    field("TransactionalId", "string", "0+"),
    field("GroupId", "string", "0+"),
    field("ProducerId", "int64", "0+"),
    field("ProducerEpoch", "int16", "0+"),
    field("GenerationId", "int32", "3+", default=-1),
    field("MemberId", "string", "3+", default=""),
    field("GroupInstanceId", "string", "3+", nullable="3+", default=None),
    field("Topics", "[]TxnOffsetCommitRequestTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]TxnOffsetCommitRequestPartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("CommittedOffset", "int64", "0+"),
            field("CommittedLeaderEpoch", "int32", "2+", default=-1),
            field("CommittedMetadata", "string", "0+", nullable="0+"),
        ]),
    ]),
])


TXN_OFFSET_COMMIT_RESPONSE = message("TxnOffsetCommitResponse", 28, "0-4", "3+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("Topics", "[]TxnOffsetCommitResponseTopic", "0+", fields=[
        field("Name", "string", "0+"),
        field("Partitions", "[]TxnOffsetCommitResponsePartition", "0+", fields=[
            field("PartitionIndex", "int32", "0+"),
            field("ErrorCode", "int16", "0+"),
        ]),
    ]),
])


DESCRIBE_TRANSACTIONS_REQUEST = message("DescribeTransactionsRequest", 65, "0", "0+", [
    field("TransactionalIds", "[]string", "0+"),
])


DESCRIBE_TRANSACTIONS_RESPONSE = message("DescribeTransactionsResponse", 65, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("TransactionStates", "[]TransactionState", "0+", fields=[
        field("ErrorCode", "int16", "0+"),
        field("TransactionalId", "string", "0+"),
        field("TransactionState", "string", "0+"),
        field("TransactionTimeoutMs", "int32", "0+"),
        field("TransactionStartTimeMs", "int64", "0+"),
        field("ProducerId", "int64", "0+"),
        field("ProducerEpoch", "int16", "0+"),
        field("Topics", "[]TopicData", "0+", fields=[
            field("Topic", "string", "0+"),
            field("Partitions", "[]int32", "0+"),
        ]),
    ]),
])


LIST_TRANSACTIONS_REQUEST = message("ListTransactionsRequest", 66, "0-1", "0+", [
    field("StateFilters", "[]string", "0+"),
    field("ProducerIdFilters", "[]int64", "0+"),
    field("DurationFilter", "int64", "1+", default=-1),
])


LIST_TRANSACTIONS_RESPONSE = message("ListTransactionsResponse", 66, "0-1", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("UnknownStateFilters", "[]string", "0+"),
    field("TransactionStates", "[]TransactionState", "0+", fields=[
        field("TransactionalId", "string", "0+"),
        field("ProducerId", "int64", "0+"),
        field("TransactionState", "string", "0+"),
    ]),
])


APIS = [
    (ADD_PARTITIONS_TO_TXN_REQUEST, ADD_PARTITIONS_TO_TXN_RESPONSE),
    (ADD_OFFSETS_TO_TXN_REQUEST, ADD_OFFSETS_TO_TXN_RESPONSE),
    (END_TXN_REQUEST, END_TXN_RESPONSE),
    (TXN_OFFSET_COMMIT_REQUEST, TXN_OFFSET_COMMIT_RESPONSE),
    (DESCRIBE_TRANSACTIONS_REQUEST, DESCRIBE_TRANSACTIONS_RESPONSE),
    (LIST_TRANSACTIONS_REQUEST, LIST_TRANSACTIONS_RESPONSE),
]
