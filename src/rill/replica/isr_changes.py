"""The leader's side of replication in ``ReplicaManager`` (a base class of it): the followers' fetch positions,
which move the high watermark, and the ISR changes they lead to, written to the metadata store.

A follower's position is recorded once its fetch was served (``update_follower_fetch_state``, called by the Fetch
handler after the read). A follower caught up to the high watermark and the start of the leader's epoch is
added to the ISR, one not caught up for ``replica.lag.time.max.ms`` taken out (``maybe_expand_isr``,
``maybe_shrink_isr``); the new ISR is written conditionally on the partition epoch, and while that write is in
flight the high watermark counts the members of the old ISR and of the new one (``Partition.maximal_isr``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from rill.common import TopicPartition
from rill.errors import KafkaError
from rill.metadata.store import MetadataStore
from rill.replica.partition import Partition
from rill.replica.purgatory import DelayedOperationPurgatory

log = logging.getLogger("rill.replica.replica_manager")


class IsrChanges:
    """Followers' positions and ISR changes of ``ReplicaManager``, which provides the state they use."""

    metadata: MetadataStore
    produce_purgatory: DelayedOperationPurgatory
    fetch_purgatory: DelayedOperationPurgatory
    _isr_changing: set[TopicPartition]
    _expanding: asyncio.Future[None] | None
    isr_shrinks: int
    isr_expands: int

    def partitions(self) -> Mapping[TopicPartition, Partition]:
        raise NotImplementedError

    def leader_partition(self, tp: TopicPartition) -> Partition:
        raise NotImplementedError

    def update_follower_fetch_state(
        self, tp: TopicPartition, replica_id: int, fetch_offset: int, log_start_offset: int = -1
    ) -> bool:
        """A follower's fetch, read without an error (its leader epoch current, its offset within the log),
        reports its log end offset (and log start offset); a high watermark that moves wakes the produces waiting
        for it and the fetches reading below it. True when the high watermark moved."""
        partition = self.leader_partition(tp)
        now_ms = int(time.time() * 1000)
        moved = partition.update_follower_fetch_state(replica_id, fetch_offset, now_ms, log_start_offset)
        if moved:
            self.produce_purgatory.check_and_complete(tp)
            self.fetch_purgatory.check_and_complete(tp)
        if replica_id not in partition.state.isr and partition.catching_up_replicas():
            self._expanding = asyncio.ensure_future(self.maybe_expand_isr(tp))
        return moved

    def follower_needs_high_watermark(self, tp: TopicPartition, replica_id: int, high_watermark: int) -> bool:
        """Whether ``high_watermark`` is above the one last sent to follower ``replica_id``."""
        partition = self.partitions().get(tp)
        follower = partition.followers.get(replica_id) if partition is not None else None
        return follower is not None and follower.last_sent_high_watermark < high_watermark

    def high_watermark_sent(self, tp: TopicPartition, replica_id: int, high_watermark: int) -> None:
        partition = self.partitions().get(tp)
        follower = partition.followers.get(replica_id) if partition is not None else None
        if follower is not None:
            follower.last_sent_high_watermark = high_watermark

    async def maybe_shrink_isr(self, lag_time_max_ms: int) -> None:
        """Take out of the ISR the followers not caught up for ``replica.lag.time.max.ms`` (as leader)."""
        now = int(time.time() * 1000)
        for partition in list(self.partitions().values()):
            if not partition.is_leader:
                continue
            out = partition.out_of_sync_replicas(now, lag_time_max_ms)
            if out:
                await self._alter_isr(partition, [r for r in partition.state.isr if r not in out], "shrink")

    async def maybe_expand_isr(self, tp: TopicPartition) -> None:
        partition = self.partitions().get(tp)
        if partition is None or not partition.is_leader:
            return
        back = partition.catching_up_replicas()
        if back:
            await self._alter_isr(partition, [*partition.state.isr, *back], "expand")

    async def _alter_isr(self, partition: Partition, isr: list[int], what: str) -> None:
        """Write a new ISR (the store answers once it is written, conditionally on the partition epoch). While the
        write is in flight the high watermark counts the members of both ISRs (``Partition.maximal_isr``)."""
        alter = getattr(self.metadata, "alter_partition", None)
        if alter is None or partition.tp in self._isr_changing:
            return
        self._isr_changing.add(partition.tp)
        pending = partition.pending_isr = tuple(isr)
        unknown = False  # whether the write may have been made without this broker knowing
        try:
            state = await alter(partition.tp.topic, partition.state, isr)
            log.info("ISR of %s %s from %s to %s", partition.tp, what, list(partition.state.isr), list(state.isr))
            if what == "shrink":
                self.isr_shrinks += 1
            else:
                self.isr_expands += 1
            current = partition.state
            # The store's watch may have brought this state, or a later one, meanwhile: never go back; and a broker
            # that stopped leading meanwhile (its session lost) does not lead again through a late answer.
            if (current.leader, current.leader_epoch) == (state.leader, state.leader_epoch) and (
                current.partition_epoch < state.partition_epoch
            ):
                partition.update_state(state)
        except KafkaError as e:
            log.info("ISR %s of %s not made: %s", what, partition.tp, e.message)
        except Exception as e:  # ZooKeeper unreachable, a lost session: the outcome is unknown
            # The write may have been made: the replicas it adds keep counting for the high watermark (Kafka keeps
            # its pending ISR) until the store brings a newer state or the session's loss ends the leadership.
            unknown = True
            log.warning("ISR %s of %s not known to be made: %s", what, partition.tp, str(e) or type(e).__name__)
        finally:
            self._isr_changing.discard(partition.tp)
            if partition.pending_isr is pending and not unknown:
                partition.pending_isr = None
            if partition.is_leader:
                partition.maybe_increment_high_watermark()
            self.produce_purgatory.check_and_complete(partition.tp)
            self.fetch_purgatory.check_and_complete(partition.tp)
