"""The share-partition state machine (KIP-932): which records of one partition a share group has in flight.

The share-partition start offset (SPSO) is the first offset not yet finished with; the end offset (SPEO) is one
past the last offset ever acquired. Between them each offset is in one state:

- AVAILABLE: may be acquired by the next fetch (released, or its lock expired);
- ACQUIRED: handed to one member until its lock expires (``group.share.record.lock.duration.ms``);
- ACKNOWLEDGED: accepted by the member that held it, never delivered again;
- ARCHIVED: rejected, released or expired after ``group.share.delivery.count.limit`` deliveries, or a gap.

Offsets below the SPSO are all finished; offsets at or above the SPEO have not been fetched. Each acquisition
increments an offset's delivery count. The SPSO moves up over finished offsets; at most
``group.share.partition.max.record.locks`` offsets are in flight (SPEO - SPSO) at once.

The class holds no clock and does no I/O: callers pass the time, and persist :meth:`snapshot`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from rill.errors import ErrorCode


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222 (ShareFetch/ShareAcknowledge v2): the holder keeps the record, its lock starts again


FINISHED = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    lock_deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one state and delivery count, as persisted (ACQUIRED is kept as AVAILABLE: a
    restarted leader hands such records out again)."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


class SharePartition:
    def __init__(
        self,
        start_offset: int,
        *,
        lock_duration_ms: int = 30000,
        delivery_count_limit: int = 5,
        max_in_flight: int = 2000,
    ) -> None:
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.records: dict[int, InFlightRecord] = {}  # offsets in [start_offset, end_offset) not default

    # -- reading the state ---------------------------------------------------------------------------

    def state_of(self, offset: int) -> RecordState | None:
        """The state of an offset in flight; None for offsets below the SPSO (finished) or at/after the SPEO."""
        if offset < self.start_offset or offset >= self.end_offset:
            return None
        return self.records[offset].state

    def next_fetch_offset(self) -> int:
        """Where the next fetch reads the log: the first AVAILABLE offset in flight, else the SPEO."""
        for offset in range(self.start_offset, self.end_offset):
            if self.records[offset].state is RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def has_available(self) -> bool:
        return self.next_fetch_offset() < self.end_offset

    def can_acquire_new(self) -> bool:
        return self.end_offset - self.start_offset < self.max_in_flight

    def next_lock_deadline_ms(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values() if r.state is RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    # -- acquisition -------------------------------------------------------------------------------------

    def acquire(
        self,
        member_id: str,
        batches: Iterable[tuple[int, int]],
        now_ms: int,
        max_records: int = 0x7FFFFFFF,
        *,
        record_limit: bool = False,
    ) -> list[AcquiredRange]:
        """Acquire for ``member_id`` the offsets of the log batches read (``(base offset, last offset)`` each,
        in order): AVAILABLE offsets in flight, then new offsets from the SPEO on, whole batches (the client
        gets whole batches and skips offsets it was not given). Stops after ``max_records`` offsets (at a batch
        boundary; with ``record_limit``, KIP-1206's record-limit mode, at exactly ``max_records``, inside a
        batch if need be) and at the in-flight limit."""
        self.expire_locks(now_ms)
        deadline = now_ms + self.lock_duration_ms
        acquired: list[int] = []
        counts: dict[int, int] = {}
        for base, last in batches:
            if len(acquired) >= max_records:
                break
            for offset in range(max(base, self.start_offset), last + 1):
                if record_limit and len(acquired) >= max_records:
                    break
                if offset < self.end_offset:
                    rec = self.records[offset]
                    if rec.state is not RecordState.AVAILABLE:
                        continue
                elif self.can_acquire_new():
                    while self.end_offset < offset:  # offsets the log no longer holds (compaction): a gap
                        self.records[self.end_offset] = InFlightRecord(RecordState.ARCHIVED, 0)
                        self.end_offset += 1
                    rec = InFlightRecord(RecordState.AVAILABLE, 0)
                    self.records[offset] = rec
                    self.end_offset += 1
                else:
                    break
                rec.state = RecordState.ACQUIRED
                rec.delivery_count += 1
                rec.member_id = member_id
                rec.lock_deadline_ms = deadline
                acquired.append(offset)
                counts[offset] = rec.delivery_count
        self._advance_start()
        return _ranges(acquired, counts)

    # -- acknowledgement -----------------------------------------------------------------------------

    def acknowledge(
        self, member_id: str, batches: Iterable[tuple[int, int, list[int]]], now_ms: int, *, renew: bool = False
    ) -> ErrorCode:
        """Apply a member's acknowledgements: ``(first offset, last offset, types)`` each, with one type for the
        whole range or one per offset. Every offset must be ACQUIRED by ``member_id``; otherwise nothing changes
        and the answer is INVALID_RECORD_STATE (a lock that expired, or records of another member). A malformed
        batch is INVALID_REQUEST, as is RENEW unless ``renew`` (a version 2 request that says it renews)."""
        self.expire_locks(now_ms)
        plan: list[tuple[int, AcknowledgeType]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                return ErrorCode.INVALID_REQUEST
            for i, offset in enumerate(range(first, last + 1)):
                raw = types[0] if len(types) == 1 else types[i]
                try:
                    ack = AcknowledgeType(raw)
                except ValueError:
                    return ErrorCode.INVALID_REQUEST
                if ack is AcknowledgeType.RENEW and not renew:
                    return ErrorCode.INVALID_REQUEST
                rec = self.records.get(offset) if self.start_offset <= offset < self.end_offset else None
                if rec is None or rec.state is not RecordState.ACQUIRED or rec.member_id != member_id:
                    return ErrorCode.INVALID_RECORD_STATE
                plan.append((offset, ack))
        for offset, ack in plan:
            rec = self.records[offset]
            if ack is AcknowledgeType.ACCEPT:
                self._finish(rec, RecordState.ACKNOWLEDGED)
            elif ack is AcknowledgeType.RELEASE:
                self._release(rec)
            elif ack is AcknowledgeType.RENEW:
                rec.lock_deadline_ms = now_ms + self.lock_duration_ms
            else:  # REJECT, GAP
                self._finish(rec, RecordState.ARCHIVED)
        self._advance_start()
        return ErrorCode.NO_ERROR

    def release_member(self, member_id: str) -> int:
        """Release every record ``member_id`` holds (it left the group or its session ended); returns how many."""
        released = 0
        for rec in self.records.values():
            if rec.state is RecordState.ACQUIRED and rec.member_id == member_id:
                self._release(rec)
                released += 1
        self._advance_start()
        return released

    def expire_locks(self, now_ms: int) -> int:
        """Records whose acquisition lock ran out become AVAILABLE again (ARCHIVED at the delivery limit)."""
        expired = 0
        for rec in self.records.values():
            if rec.state is RecordState.ACQUIRED and rec.lock_deadline_ms <= now_ms:
                self._release(rec)
                expired += 1
        if expired:
            self._advance_start()
        return expired

    def move_start_to(self, log_start_offset: int) -> None:
        """The log's start moved past records (retention, DeleteRecords): they can never be delivered."""
        if log_start_offset <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start_offset, self.end_offset)):
            del self.records[offset]
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        self._advance_start()

    def skip_to(self, offset: int) -> None:
        """The log holds nothing to deliver below ``offset`` past the SPEO (transaction markers, records of
        aborted transactions under read_committed): those offsets are archived as gaps, so later fetches read on
        from ``offset`` instead of reading them again (as far as the in-flight limit allows)."""
        while self.end_offset < offset and self.can_acquire_new():  # never past the in-flight limit
            self.records[self.end_offset] = InFlightRecord(RecordState.ARCHIVED, 0)
            self.end_offset += 1
            self._advance_start()

    # -- persistence ---------------------------------------------------------------------------------

    def snapshot(self) -> list[StateBatch]:
        """The in-flight offsets as runs of (state, delivery count), ACQUIRED written as AVAILABLE."""
        out: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            rec = self.records[offset]
            state = RecordState.AVAILABLE if rec.state is RecordState.ACQUIRED else rec.state
            if out and out[-1].last_offset == offset - 1 and out[-1].state is state \
                    and out[-1].delivery_count == rec.delivery_count:  # fmt: skip
                prev = out[-1]
                out[-1] = StateBatch(prev.first_offset, offset, state, rec.delivery_count)
            else:
                out.append(StateBatch(offset, offset, state, rec.delivery_count))
        return out

    def restore(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Load a persisted state (a restarted or new leader). Records that were acquired are AVAILABLE again,
        or ARCHIVED when they were delivered ``group.share.delivery.count.limit`` times. Offsets left out between
        batches are AVAILABLE with no delivery; the SPEO is one past the last batch."""
        self.records.clear()
        self.start_offset = self.end_offset = start_offset
        for b in sorted(batches, key=lambda b: b.first_offset):
            state = RecordState.AVAILABLE if b.state is RecordState.ACQUIRED else b.state
            if state is RecordState.AVAILABLE and b.delivery_count >= self.delivery_count_limit:
                state = RecordState.ARCHIVED  # its last delivery was lost with the old leader: no more
            for offset in range(max(b.first_offset, start_offset), b.last_offset + 1):
                while self.end_offset < offset:
                    self.records[self.end_offset] = InFlightRecord(RecordState.AVAILABLE, 0)
                    self.end_offset += 1
                if offset == self.end_offset:
                    self.end_offset += 1
                self.records[offset] = InFlightRecord(state, b.delivery_count)
        self._advance_start()

    # -- internals -----------------------------------------------------------------------------------

    def _release(self, rec: InFlightRecord) -> None:
        if rec.delivery_count >= self.delivery_count_limit:
            self._finish(rec, RecordState.ARCHIVED)
        else:
            rec.state = RecordState.AVAILABLE
            rec.member_id = None
            rec.lock_deadline_ms = 0

    @staticmethod
    def _finish(rec: InFlightRecord, state: RecordState) -> None:
        rec.state = state
        rec.member_id = None
        rec.lock_deadline_ms = 0

    def _advance_start(self) -> None:
        while self.start_offset < self.end_offset and self.records[self.start_offset].state in FINISHED:
            del self.records[self.start_offset]
            self.start_offset += 1


def _ranges(offsets: list[int], counts: dict[int, int]) -> list[AcquiredRange]:
    out: list[AcquiredRange] = []
    for offset in offsets:
        count = counts[offset]
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = AcquiredRange(out[-1].first_offset, offset, count)
        else:
            out.append(AcquiredRange(offset, offset, count))
    return out
