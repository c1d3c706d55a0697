"""The offset syncs of a mirror as its processes wrote them: the topic ``mirror.<name>.offset-syncs`` on the
target (created when missing), read from its start when a process starts and read on, from where it stopped,
each time the process takes partitions over.

Reading on at a takeover matters: the previous owner of a partition (another process, or this one before a
rebalance) wrote syncs after this process last read, and made them durable before committing the position the
new owner starts from. Translating a group's offset without them would map a position below the new owner's
first copy to that copy, past the records in between (``PartitionSyncs.translate``).

The syncs of a partition this process copies now are left as they are in memory: they are ahead of the topic
(written asynchronously, some perhaps not yet), and reading back an older one would cut the newer ones.
Syncs are read with read_committed: those of an aborted transaction (``--exactly-once``) describe copies no
read_committed consumer sees, and the copy made again after the abort writes its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, MutableMapping
from typing import Any

from rill.mirror.offset_sync import PartitionSyncs, decode_sync, syncs_topic

log = logging.getLogger(__name__)

TopicPart = tuple[str, int]
TIMEOUT_S = 15.0
READ_TIMEOUT_S = 60.0  # an open transaction of a dead process holds read_committed back until it is aborted


class OffsetSyncStore:
    def __init__(self, target: str, name: str, group_id: str, target_props: dict[str, Any], prefix: str = "") -> None:
        self.topic = syncs_topic(name)
        self._prefix = prefix  # a sync names the target topic, prefix + the source topic
        self._target = target
        self._group_id = group_id
        self._props = target_props
        self._reader: Any = None
        self._position = -1  # the next offset of the syncs topic to read; -1 before the first read

    def ensure_topic(self, admin: Any) -> None:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        if self.topic in admin.list_topics(timeout=TIMEOUT_S).topics:
            return
        new = NewTopic(self.topic, 1, config={"retention.ms": "-1", "retention.bytes": "-1"})
        try:
            admin.create_topics([new])[self.topic].result(TIMEOUT_S)
        except Exception as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise

    def catch_up(self, syncs: MutableMapping[TopicPart, PartitionSyncs], copying: Collection[TopicPart]) -> int:
        """Read the syncs written since the last read, up to the topic's end now, into ``syncs`` (by source
        topic and partition, as ``copying``), except those of the partitions in ``copying``. Returns how many
        were read."""
        from confluent_kafka import Consumer, TopicPartition

        if self._reader is None:
            self._reader = Consumer({
                "bootstrap.servers": self._target,
                "group.id": f"{self._group_id}-syncs-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                **self._props,
            })  # fmt: skip
        reader = self._reader
        tp = TopicPartition(self.topic, 0)
        low, high = reader.get_watermark_offsets(tp, timeout=TIMEOUT_S, cached=False)
        start = max(low, self._position)
        if start >= high:
            return 0
        if start != self._position:
            reader.assign([TopicPartition(self.topic, 0, start)])
        read = 0
        position = start
        deadline = time.monotonic() + READ_TIMEOUT_S
        while position < high:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cannot read the offset syncs of {self.topic} (at {position} of {high})")
            for msg in reader.consume(10_000, 0.5):
                if msg.error():
                    continue
                position = max(position, msg.offset() + 1)
                sync = decode_sync(msg.key(), msg.value())
                if sync is None:
                    continue
                t, p, s, tgt = sync
                if not t.startswith(self._prefix) or len(t) == len(self._prefix):
                    continue  # not a topic this mirror writes
                t = t[len(self._prefix) :]
                if (t, p) not in copying:
                    syncs.setdefault((t, p), PartitionSyncs()).load(s, tgt)
                    read += 1
            # The fetch position, past transaction markers too (no message stands for them).
            fetched = reader.position([tp])[0].offset
            position = max(position, fetched)
        self._position = position
        return read

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
