"""Idempotent-producer state of one partition, and its snapshot files (``<20-digit offset>.snapshot``).

For every producer id the log keeps its epoch and the metadata of its last five batches
(first/last sequence, first/last offset, timestamp), which is enough to recognise a retried
batch and to reject gaps. Rules (Kafka's ProducerAppendInfo):

- an epoch lower than the producer's current one: INVALID_PRODUCER_EPOCH;
- a new (higher) epoch must start at sequence 0, except for a producer the log does not know
  (its state expired or was lost), which is accepted at any sequence;
- within an epoch the first sequence must follow the previous last sequence (wrapping at
  2**31 - 1 to 0), otherwise OUT_OF_ORDER_SEQUENCE_NUMBER;
- a batch whose sequence range matches one of the five remembered batches is a duplicate.

Transactions (Kafka's ProducerAppendInfo and ProducerStateManager): a producer's first transactional
batch on the partition starts its ongoing transaction at that batch's offset
(``current_txn_first_offset``); a non-transactional batch while one is ongoing is refused
(INVALID_TXN_STATE). A control batch (COMMIT or ABORT marker) ends it: a marker below the producer's
epoch is refused (INVALID_PRODUCER_EPOCH), one of a higher epoch bumps it, one whose coordinator
epoch is below the last one seen for the producer is refused (TRANSACTION_COORDINATOR_FENCED).
A completed transaction stays "unreplicated" until the high watermark passes its marker. The first
unstable offset is the smallest first offset of the ongoing and unreplicated transactions; the log's
last stable offset is the high watermark bounded by it. Replicas and replay apply batches without
these checks.

A snapshot holds, for the state as of its offset, the last batch of each producer. Layout
(big-endian)::

    offset  size  field
         0     2  version        int16   1
         2     4  crc            uint32  CRC32C of every byte after this field
         6     4  count          int32   number of producer entries
        10   46*n entries, each:
                  producerId int64, producerEpoch int16, lastSequence int32, lastOffset int64,
                  offsetDelta int32 (lastOffset - firstOffset), timestamp int64,
                  coordinatorEpoch int32, currentTxnFirstOffset int64 (-1 when no transaction is ongoing)

Snapshots are taken when a segment rolls and at clean shutdown; on load the newest readable
snapshot at or below the log end is read and the batches after it are replayed. Producers idle for
``producer.id.expiration.ms`` with no transaction open are forgotten (``remove_expired_producers``, which the
log manager runs every ``producer.id.expiration.check.interval.ms`` and once after the start), so neither the
state nor its snapshots grow with every producer that ever wrote.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from crc32c_rs import crc32c

from rill.common import named_tuple_from
from rill.errors import ErrorCode, KafkaError
from rill.records.batch import (
    CONTROL_MASK,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    BatchHeader,
    increment_sequence,
)
from rill.records.control import EndTxnMarker

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")
assert _ENTRY.size == 46


class CompletedTxn(NamedTuple):
    """A transaction a marker ended on this partition: its first offset and the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class VerificationGuard:
    """Kafka's VerificationGuard: taken before a partition leader asks the transaction coordinator whether a
    producer's transaction includes the partition (KIP-890), and checked when the batch is appended. A marker
    of the producer (its transaction ended meanwhile, e.g. aborted while the answer was on its way) or the
    start of its transaction here clears it, so a verified batch that would open a transaction after its
    transaction ended is refused instead of opening one that no marker closes. ``last_used_ms`` (wall clock) is
    when a verification last took it: a guard whose verification was refused (nothing clears it) goes after
    ``producer.id.expiration.ms``, as Kafka's verification entries do."""

    __slots__ = ("last_used_ms", "producer_epoch", "producer_id")

    def __init__(self, producer_id: int, producer_epoch: int, now_ms: int = -1) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_used_ms = int(time.time() * 1000) if now_ms < 0 else now_ms

    def __repr__(self) -> str:
        return f"VerificationGuard(producer {self.producer_id}, epoch {self.producer_epoch})"


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        last_seq = header.last_sequence
        for batch in self.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == last_seq:
                return batch
        return None

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.current_txn_first_offset,
            self.last_timestamp,
        )


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == 2**31 - 1)


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(dir: Path) -> list[int]:
    """Offsets of the snapshot files in ``dir``, sorted."""
    out = []
    for path in dir.glob("*" + SNAPSHOT_SUFFIX):
        stem = path.name[: -len(SNAPSHOT_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


class ProducerStateManager:
    """Per-partition producer state; all methods run on the event loop."""

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # the state covers every batch below this offset
        self.last_snapshot_offset = -1  # the newest snapshot written or loaded; -1 when none is known
        self.ongoing_txns: dict[int, int] = {}  # producer id -> first offset of its ongoing transaction
        self.unreplicated_txns: list[CompletedTxn] = []  # completed, marker not yet below the high watermark
        self.verification_guards: dict[int, VerificationGuard] = {}  # producer id -> its verification under way

    # ---- validation on the append path --------------------------------------------------------

    def prepare(self, header: BatchHeader, pending: dict[int, ProducerStateEntry]) -> BatchMetadata | None:
        """Validate ``header`` against the current state plus ``pending`` (earlier batches of the
        same append); return the original batch when it is a duplicate, else None. Raises
        KafkaError on a fenced epoch or a sequence gap."""
        pid = header.producer_id
        current = self.producers.get(pid)
        updated = pending.get(pid)
        if updated is None:
            if current is not None:
                duplicate = current.find_duplicate(header)
                if duplicate is not None:
                    return duplicate
            updated = current.copy() if current is not None else ProducerStateEntry(pid)
            pending[pid] = updated
        _check_sequence(updated, header)
        _apply(updated, header, -1, -1)  # offsets are filled in by ``record``
        return None

    def check_one(self, header: BatchHeader) -> BatchMetadata | None:
        """``prepare`` for an append of this one batch: nothing is copied, and the state changes
        only in ``append_one`` once the batch is written."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None  # a producer the log does not know starts at any sequence (``_check_sequence``)
        if entry.current_txn_first_offset >= 0 and not header.attributes & 0x10:  # TRANSACTIONAL_MASK
            _refuse_non_transactional(entry)
        batches = entry.batches
        if (
            batches
            and header.producer_epoch == entry.producer_epoch
            and _in_sequence(batches[-1].last_seq, header.base_sequence)
        ):
            # The usual case: the next batch in sequence, which no retained batch can match (their
            # sequences lie at or below the last one).
            return None
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return duplicate
        _check_sequence(entry, header)
        return None

    def append_one(self, header: BatchHeader, first_offset: int, ts: int) -> None:
        """Apply the batch passed by ``check_one``, written at ``first_offset``."""
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        _apply(entry, header, first_offset, ts)
        if header.attributes & 0x10 and entry.current_txn_first_offset < 0:  # TRANSACTIONAL_MASK: opens one
            entry.current_txn_first_offset = self.ongoing_txns[pid] = first_offset
            if self.verification_guards:
                self.verification_guards.pop(pid, None)
        end = first_offset + header.last_offset_delta + 1
        if end > self.map_end_offset:
            self.map_end_offset = end

    @staticmethod
    def record(pending: dict[int, ProducerStateEntry], header: BatchHeader, first_offset: int, ts: int) -> None:
        """Give the batch validated by ``prepare`` its assigned offsets and timestamp."""
        entry = pending[header.producer_id]
        entry.last_timestamp = ts
        if header.attributes & TRANSACTIONAL_MASK and not header.is_control and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
        if header.is_control or header.base_sequence == NO_SEQUENCE:
            return
        batches = list(entry.batches)
        for n in range(len(batches) - 1, -1, -1):
            if batches[n].first_offset == -1 and batches[n].first_seq == header.base_sequence:
                batches[n] = BatchMetadata(
                    header.base_sequence,
                    header.last_sequence,
                    first_offset,
                    first_offset + header.last_offset_delta,
                    ts,
                )
                entry.batches = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)
                return

    def commit(self, pending: dict[int, ProducerStateEntry], end_offset: int) -> None:
        self.producers.update(pending)
        for pid, entry in pending.items():
            if entry.current_txn_first_offset >= 0 and pid not in self.ongoing_txns:
                self.ongoing_txns[pid] = entry.current_txn_first_offset
                self.verification_guards.pop(pid, None)
        self.map_end_offset = max(self.map_end_offset, end_offset)

    # ---- transactions -------------------------------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker the leader must not append (the rules of the module doc); changes nothing."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"marker for producer {producer_id} at epoch {producer_epoch}, below its epoch {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, below the"
                f" last seen {entry.coordinator_epoch}",
            )

    def apply_marker(self, header: BatchHeader, marker: EndTxnMarker | None, offset: int) -> CompletedTxn | None:
        """Apply a control batch at ``offset`` (already checked, or replicated): the producer's ongoing
        transaction ends; returns it (None when the producer had none here). The caller records an aborted
        one in the transaction index (with ``last_stable_offset``) and then calls ``complete_txn``."""
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if header.producer_epoch != entry.producer_epoch:
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        self.verification_guards.pop(pid, None)  # a verification under way saw the transaction before this
        entry.last_timestamp = header.max_timestamp
        end = offset + header.last_offset_delta + 1
        if end > self.map_end_offset:
            self.map_end_offset = end
        if marker is None:
            return None
        entry.coordinator_epoch = marker.coordinator_epoch
        first = entry.current_txn_first_offset
        if first < 0:
            return None
        entry.current_txn_first_offset = -1
        return CompletedTxn(pid, first, offset, not marker.commit)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The partition's last stable offset once ``completed`` ends (before ``complete_txn``)."""
        others = [first for pid, first in self.ongoing_txns.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        self.ongoing_txns.pop(completed.producer_id, None)
        self.unreplicated_txns.append(completed)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        if self.unreplicated_txns:
            self.unreplicated_txns = [t for t in self.unreplicated_txns if t.last_offset >= high_watermark]

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Completed transactions wholly below the new log start no longer hold back the last stable offset
        (an open one that began below it is bounded by the log start, see ``Log.last_stable_offset``)."""
        if self.unreplicated_txns:
            self.unreplicated_txns = [t for t in self.unreplicated_txns if t.last_offset >= log_start_offset]
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of the ongoing and unreplicated transactions (None: there is none)."""
        ongoing, unreplicated = self.ongoing_txns, self.unreplicated_txns
        if not ongoing and not unreplicated:
            return None
        return min([*ongoing.values(), *(t.first_offset for t in unreplicated)])

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Kafka's ``producer.id.expiration.ms``: forget the producers whose last batch is ``expiration_ms`` old
        or older and that have no transaction open here (the next snapshot leaves them out). A batch of a
        forgotten producer is taken as one of a producer the log does not know (any sequence). Verification
        guards unused as long go too (those of refused verifications, e.g. of producer ids no coordinator
        knows, which nothing else clears). Returns the producers' ids."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
            self.verification_guards.pop(pid, None)
        if self.verification_guards:
            stale = [pid for pid, g in self.verification_guards.items() if now_ms - g.last_used_ms >= expiration_ms]
            for pid in stale:
                del self.verification_guards[pid]
        return expired

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        """Whether the producer has a transaction open here (at ``producer_epoch``, when given: a transaction
        of an older epoch, whose marker is yet to come, is not the producer's current one)."""
        if producer_id not in self.ongoing_txns:
            return False
        return producer_epoch is None or self.producers[producer_id].producer_epoch == producer_epoch

    def start_verification(self, producer_id: int, producer_epoch: int) -> VerificationGuard:
        """The guard of a verification of the producer's transaction (the one under way, when there is one of
        this epoch: concurrent requests of the producer share it)."""
        guard = self.verification_guards.get(producer_id)
        if guard is None or guard.producer_epoch != producer_epoch:
            guard = self.verification_guards[producer_id] = VerificationGuard(producer_id, producer_epoch)
        else:
            guard.last_used_ms = int(time.time() * 1000)
        return guard

    def check_verified(self, guard: VerificationGuard) -> None:
        """Before a verified transactional batch is appended: refuse it (INVALID_TXN_STATE) when it would open
        a transaction and its verification no longer holds (a marker of the producer landed meanwhile)."""
        if self.has_ongoing_txn(guard.producer_id, guard.producer_epoch):
            return
        if self.verification_guards.get(guard.producer_id) is not guard:
            raise KafkaError(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {guard.producer_id}'s transaction ended while the batch was verified; it is not part of"
                " an ongoing transaction",
            )

    # ---- replay on load -----------------------------------------------------------------------

    def replay(self, header: BatchHeader, marker: EndTxnMarker | None = None) -> CompletedTxn | None:
        """Apply a batch read back from the log or replicated (no validation); for a control batch,
        ``marker`` is its transaction marker. Returns the transaction a marker completed, which the caller
        indexes (when aborted) and hands to ``complete_txn``."""
        if header.attributes & CONTROL_MASK and header.producer_id >= 0:
            return self.apply_marker(header, marker, header.base_offset)
        if header.has_producer_id:
            pid = header.producer_id
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid)
            _apply(entry, header, header.base_offset, header.max_timestamp)
            if header.attributes & TRANSACTIONAL_MASK and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = self.ongoing_txns[pid] = header.base_offset
        self.map_end_offset = max(self.map_end_offset, header.next_offset)
        return None

    # ---- snapshots ----------------------------------------------------------------------------

    def take_snapshot(self, offset: int, sync: bool = False) -> Path:
        body = bytearray(_HEAD.size)
        entries = [e for e in self.producers.values() if e.batches or e.producer_epoch >= 0]
        struct.pack_into(">i", body, 6, len(entries))
        for e in entries:
            last = e.batches[-1] if e.batches else None
            body += _ENTRY.pack(
                e.producer_id,
                e.producer_epoch,
                last.last_seq if last else NO_SEQUENCE,
                last.last_offset if last else -1,
                (last.last_offset - last.first_offset) if last else 0,
                max(e.last_timestamp, last.timestamp if last else -1),
                e.coordinator_epoch,
                e.current_txn_first_offset,
            )
        crc = crc32c(memoryview(body)[6:])
        struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
        path = self.dir / snapshot_file_name(offset)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, body)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.last_snapshot_offset = offset
        return path

    def load_latest_snapshot(self, upto: int) -> int:
        """Load the newest valid snapshot at or below ``upto``; returns its offset (0 if none).

        Snapshots above ``upto`` and unreadable ones are deleted.
        """
        self.producers = {}
        self.ongoing_txns = {}
        self.unreplicated_txns = []
        self.verification_guards = {}
        self.map_end_offset = 0
        self.last_snapshot_offset = -1
        for offset in reversed(snapshot_offsets(self.dir)):
            path = self.dir / snapshot_file_name(offset)
            if offset > upto:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            try:
                self.producers = read_snapshot(path)
            except (OSError, ValueError, struct.error) as e:
                log.warning("Deleting unreadable producer snapshot %s: %s", path, e)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            self.map_end_offset = self.last_snapshot_offset = offset
            txns = sorted((e.current_txn_first_offset, pid) for pid, e in self.producers.items())
            self.ongoing_txns = {pid: first for first, pid in txns if first >= 0}
            return offset
        return 0

    def delete_snapshots_below(self, offset: int) -> None:
        offsets = snapshot_offsets(self.dir)
        for o in offsets[:-1]:  # keep the newest
            if o < offset:
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / snapshot_file_name(o)).unlink()

    def delete_snapshots_above(self, offset: int) -> None:
        if self.last_snapshot_offset > offset:
            self.last_snapshot_offset = -1
        for o in snapshot_offsets(self.dir):
            if o > offset:
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / snapshot_file_name(o)).unlink()

    def clear(self) -> None:
        self.producers = {}
        self.ongoing_txns = {}
        self.unreplicated_txns = []
        self.verification_guards = {}
        self.map_end_offset = 0
        self.delete_snapshots_above(-1)


def _check_sequence(entry: ProducerStateEntry, header: BatchHeader) -> None:
    """The epoch and sequence rules of the module doc for ``header`` after the batches of ``entry``."""
    pid = header.producer_id
    epoch = header.producer_epoch
    if epoch < entry.producer_epoch:
        raise KafkaError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer {pid} epoch {epoch} is older than the current epoch {entry.producer_epoch}",
        )
    if header.is_control:
        return
    if entry.current_txn_first_offset >= 0 and not header.attributes & TRANSACTIONAL_MASK:
        _refuse_non_transactional(entry)
    first_seq = header.base_sequence
    if first_seq == NO_SEQUENCE and header.attributes & TRANSACTIONAL_MASK:
        return  # the group coordinator's transactional offset commits carry no sequence
    if epoch != entry.producer_epoch:
        if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid}: first sequence of new epoch {epoch} is {first_seq}, expected 0",
            )
    else:
        last_seq = entry.last_seq
        if (last_seq == NO_SEQUENCE and first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH) or (
            last_seq != NO_SEQUENCE and not _in_sequence(last_seq, first_seq)
        ):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {last_seq}",
            )


def _refuse_non_transactional(entry: ProducerStateEntry) -> None:
    raise KafkaError(
        ErrorCode.INVALID_TXN_STATE,
        f"producer {entry.producer_id} wrote a non-transactional batch while its transaction from offset"
        f" {entry.current_txn_first_offset} is ongoing",
    )


def _apply(entry: ProducerStateEntry, header: BatchHeader, first_offset: int, ts: int) -> None:
    if header.producer_epoch != entry.producer_epoch:
        entry.producer_epoch = header.producer_epoch
        entry.batches.clear()
    entry.last_timestamp = ts
    first_seq = header.base_sequence
    if header.attributes & CONTROL_MASK or first_seq == NO_SEQUENCE:
        return
    delta = header.last_offset_delta
    entry.batches.append(
        named_tuple_from(
            BatchMetadata,
            (first_seq, increment_sequence(first_seq, delta), first_offset, first_offset + delta, ts),
        )
    )


def read_snapshot(path: Path) -> dict[int, ProducerStateEntry]:
    data = path.read_bytes()
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"unsupported snapshot version {version}")
    if crc32c(memoryview(data)[6:]) != crc:
        raise ValueError("snapshot CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise ValueError("snapshot length does not match its entry count")
    out: dict[int, ProducerStateEntry] = {}
    for n in range(count):
        pid, epoch, last_seq, last_offset, delta, ts, coord_epoch, txn_first = _ENTRY.unpack_from(
            data, _HEAD.size + n * _ENTRY.size
        )
        entry = ProducerStateEntry(
            pid, epoch, coordinator_epoch=coord_epoch, current_txn_first_offset=max(txn_first, -1), last_timestamp=ts
        )
        if last_offset >= 0:
            first_seq = last_seq if last_seq == NO_SEQUENCE else _decrement_sequence(last_seq, delta)
            entry.batches.append(BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, ts))
        out[pid] = entry
    return out


def _decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return 2**31 - 1 - (decrement - sequence) + 1
    return sequence - decrement


__all__ = [
    "BatchMetadata",
    "CompletedTxn",
    "ProducerStateEntry",
    "ProducerStateManager",
    "VerificationGuard",
    "increment_sequence",
    "read_snapshot",
    "snapshot_file_name",
    "snapshot_offsets",
]
