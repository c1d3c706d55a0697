"""Exactly-once copying (``rill mirror --exactly-once``): each source partition is copied by a transactional
producer of its own (transactional id ``rill-mirror-<name>-<topic>-<partition>``), and each batch of its
records is one transaction on the target holding the records, their offset syncs, and the mirror's new
position in that partition, committed as the offset of the target consumer group ``rill-mirror-<name>`` for the
target partition (``send_offsets_to_transaction``: the TxnOffsetCommit of the transaction).

So the position and the copy commit together or not at all. A process that takes a partition over (a restart,
or another process of the mirror after a rebalance) first initialises that partition's transactional id, which
fences the previous owner and aborts its open transaction, then reads the committed position (a stable offset)
and resumes there: a consumer reading the target with ``read_committed`` sees every source record exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
TIMEOUT_S = 30.0


class TransactionalCopy:
    def __init__(
        self,
        target: str,
        group_id: str,
        target_props: dict[str, Any],
        target_admin: Any,
        on_delivery: Callable[[Any, Any], None],
    ) -> None:
        self._target = target
        self._group_id = group_id
        self._props = target_props
        self._admin = target_admin
        self._on_delivery = on_delivery
        self._producers: dict[TopicPart, Producer] = {}  # by source (topic, partition)
        # The transactions commit the position as this group's offsets on the target; a consumer that never
        # subscribes gives the group's metadata of a non-member (generation -1), which the coordinator takes.
        self._progress = Consumer({"bootstrap.servers": target, "group.id": group_id, **target_props})
        self._group_metadata = self._progress.consumer_group_metadata()

    def start(self, key: TopicPart, target_topic: str, log_end: Callable[[], int] | None = None) -> int:
        """Take a source partition over: fence its previous owner, and return the position to copy from: the
        committed one; for a partition never copied, the beginning, or with ``log_end`` (the source consumer's
        ``auto.offset.reset=latest``) the source log's end now, committed first in a transaction of its own
        (a process killed before its first batch leaves the next one the same start)."""
        producer = Producer({
            "bootstrap.servers": self._target,
            "transactional.id": f"{self._group_id}-{key[0]}-{key[1]}",
            "transaction.timeout.ms": 10_000,  # a dead owner's open transaction is aborted within seconds
            "linger.ms": 5,
            "on_delivery": self._on_delivery,
            **self._props,
        })  # fmt: skip
        producer.init_transactions(TIMEOUT_S)
        self._producers[key] = producer
        position = self._position(target_topic, key[1])
        if position != OFFSET_BEGINNING or log_end is None:
            return position
        position = log_end()
        producer.begin_transaction()
        producer.send_offsets_to_transaction([KafkaTopicPartition(target_topic, key[1], position)],
                                             self._group_metadata, TIMEOUT_S)  # fmt: skip
        producer.commit_transaction(TIMEOUT_S)
        return position

    def _position(self, target_topic: str, partition: int) -> int:
        request = [ConsumerGroupTopicPartitions(self._group_id, [KafkaTopicPartition(target_topic, partition)])]
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                result = self._admin.list_consumer_group_offsets(request, require_stable=True)
                listed = result[self._group_id].result(TIMEOUT_S)
            except KafkaException as e:
                if time.monotonic() > deadline:
                    raise
                log.info("position of %s-%d not stable yet: %s", target_topic, partition, e)
                time.sleep(0.2)
                continue
            for tp in listed.topic_partitions:
                if tp.error is not None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"position of {target_topic}-{partition}: {tp.error}")
                    time.sleep(0.2)
                    break
                return int(tp.offset) if tp.offset >= 0 else OFFSET_BEGINNING
            else:
                return OFFSET_BEGINNING

    def stop(self, key: TopicPart) -> None:
        producer = self._producers.pop(key, None)
        if producer is not None:
            producer.flush(TIMEOUT_S)

    def copy(
        self,
        key: TopicPart,
        target_topic: str,
        messages: list[Any],
        record_in_flight: Callable[[int, int], None],
        take_syncs: Callable[[], list[tuple[bytes, bytes]]],
        syncs_topic: str,
    ) -> None:
        """Copy one partition's batch of records as one transaction, with their syncs and the new position."""
        producer = self._producers[key]
        partition = key[1]
        try:
            producer.begin_transaction()
            for msg in messages:
                ts_type, ts = msg.timestamp()
                record_in_flight(msg.offset(), ts)
                while True:
                    try:
                        producer.produce(target_topic, msg.value(), msg.key(), partition,
                                         timestamp=ts if ts_type else 0, headers=msg.headers())  # fmt: skip
                        break
                    except BufferError:
                        producer.poll(0.05)
            # The acknowledgements give the target offsets, hence the syncs, which join the transaction.
            if producer.flush(TIMEOUT_S) > 0:
                raise RuntimeError(f"{target_topic}-{partition}: records not acknowledged in time")
            for sync_key, sync_value in take_syncs():
                producer.produce(syncs_topic, sync_value, sync_key)
            position = KafkaTopicPartition(target_topic, partition, messages[-1].offset() + 1)
            producer.send_offsets_to_transaction([position], self._group_metadata, TIMEOUT_S)
            producer.commit_transaction(TIMEOUT_S)
        except KafkaException as e:
            error = e.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(TIMEOUT_S)
            raise RuntimeError(f"{target_topic}-{partition}: transaction failed: {error}") from e

    def close(self) -> None:
        for key in list(self._producers):
            self.stop(key)
        self._progress.close()
