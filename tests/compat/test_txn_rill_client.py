"""Rill's own transactional producer (``rill.client.transactional``, the Spark exactly-once sink's) against a
broker: commit, abort, offsets in a transaction, a transaction prepared by one client and committed by another,
fencing by a new instance; read back by confluent-kafka's read_committed consumer."""

from __future__ import annotations

import pytest
from tests.compat._txn import BROKER_CONFIGS, committed_offsets, create_topic, read_all, read_partition

from rill.client import KafkaClient
from rill.client.transactional import TransactionalProducer, end_transaction
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.rill_broker_config(BROKER_CONFIGS)


def test_commit_abort_and_offsets(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "rc-t", 2)
    with KafkaClient(bootstrap, timeout_s=20) as client:
        p = TransactionalProducer(client, "rc-app")
        p.begin_transaction()
        for i in range(10):
            p.send("rc-t", b"kept-%d" % i, partition=i % 2)
        p.send_offsets_to_transaction({TopicPartition("rc-t", 0): 5}, "rc-group", metadata="five")
        p.commit_transaction()
        p.begin_transaction()
        for i in range(10):
            p.send("rc-t", b"aborted-%d" % i, partition=i % 2)
        p.flush()
        p.send_offsets_to_transaction({TopicPartition("rc-t", 0): 9}, "rc-group")
        p.abort_transaction()
        p.begin_transaction()
        p.send("rc-t", b"dropped", partition=0)  # never sent: abort drops the buffer
        p.abort_transaction()
        with pytest.raises(KafkaError) as ei:
            p.send("rc-t", b"outside", partition=0)
        assert ei.value.code == ErrorCode.INVALID_TXN_STATE
    assert sorted(read_all(bootstrap, "rc-t", 2)) == sorted(b"kept-%d" % i for i in range(10))
    assert len(read_all(bootstrap, "rc-t", 2, committed=False)) == 20
    assert committed_offsets(bootstrap, "rc-group", "rc-t", 1) == {0: 5}


def test_prepared_by_one_client_committed_by_another(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "rc-2pc", 1)
    with KafkaClient(bootstrap, timeout_s=20) as client:
        p = TransactionalProducer(client, "rc-2pc-task-0")
        p.begin_transaction()
        p.send("rc-2pc", b"staged", partition=0)
        p.send_offsets_to_transaction({TopicPartition("rc-2pc", 0): 7}, "rc-2pc-task-0")
        prepared = p.prepare_commit()
    assert read_partition(bootstrap, "rc-2pc", 0) == []  # open: past the last stable offset
    with KafkaClient(bootstrap, timeout_s=20) as other:
        end_transaction(other, prepared, commit=True)
        end_transaction(other, prepared, commit=True)  # a retried commit is answered as a success
        assert other.fetch_committed("rc-2pc-task-0", [TopicPartition("rc-2pc", 0)], require_stable=True) == {
            TopicPartition("rc-2pc", 0): 7
        }
    assert read_partition(bootstrap, "rc-2pc", 0) == [b"staged"]


def test_a_new_instance_fences_and_aborts_the_prepared_one(rill_broker) -> None:
    bootstrap = rill_broker.bootstrap_servers
    create_topic(bootstrap, "rc-fence", 1)
    with KafkaClient(bootstrap, timeout_s=20) as client:
        old = TransactionalProducer(client, "rc-fence-app")
        old.begin_transaction()
        old.send("rc-fence", b"zombie", partition=0)
        prepared = old.prepare_commit()
        new = TransactionalProducer(client, "rc-fence-app")  # bumps the epoch, aborts the open transaction
        assert new.producer_id == prepared.producer_id
        assert new.producer_epoch > prepared.producer_epoch  # +2: the abort is written at a fenced epoch first
        with pytest.raises(KafkaError) as ei:
            end_transaction(client, prepared, commit=True)
        assert ei.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
        new.begin_transaction()
        new.send("rc-fence", b"live", partition=0)
        new.commit_transaction()
    assert read_partition(bootstrap, "rc-fence", 0) == [b"live"]
    assert read_partition(bootstrap, "rc-fence", 0, committed=False) == [b"zombie", b"live"]
