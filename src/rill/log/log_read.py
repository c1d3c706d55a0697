"""The read side of a partition log (a part of ``Log``): fetch reads up to the high watermark, the log end or,
for read_committed, the last stable offset with the aborted transactions in range; time lookups.

``LogReadSide`` holds no state of its own: it reads the ``Log``'s segment list and offsets (the names it
declares), through the pure functions of ``rill.log.log_reader``.
"""

from __future__ import annotations

import os

from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.fetch_data_info import FetchDataInfo
from rill.log.log_reader import (
    collect_aborted_transactions,
    find_offset_by_timestamp,
    max_timestamp_and_offset,
    read_regions,
    read_regions_and_end,
)
from rill.log.log_segment import LogSegment
from rill.log.producer_state import ProducerStateManager
from rill.log.transaction_index import AbortedTxn


class LogReadSide:
    """Reads of ``Log`` (a base class of it)."""

    _tp: TopicPartition
    _segments: list[LogSegment]
    _log_start_offset: int
    _leo: int
    _high_watermark: int
    producer_state: ProducerStateManager

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or below it the first offset of a transaction not yet completed and
        replicated (never below the log start): read_committed consumers read up to here."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return min(max(first_unstable, self._log_start_offset), self._high_watermark)

    # ---- read ---------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> FetchDataInfo:
        if offset < self._log_start_offset or offset > self._leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{self._tp}: offset {offset} is outside [{self._log_start_offset}, {self._leo}]",
            )
        if offset == self._leo or (max_offset is not None and offset >= max_offset):
            return FetchDataInfo(offset)
        regions = read_regions(self._segments, offset, max_bytes, max_offset, min_one_batch)
        return FetchDataInfo(offset, regions, sum(r.length for r in regions))

    def read_committed(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> FetchDataInfo:
        """A read_committed read: up to the last stable offset, with the aborted transactions that overlap
        the data returned (from the transaction indexes)."""
        lso = self.last_stable_offset
        if offset < self._log_start_offset or offset > self._leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{self._tp}: offset {offset} is outside [{self._log_start_offset}, {self._leo}]",
            )
        if offset >= lso:
            return FetchDataInfo(offset, [], 0, [])
        regions, upper = read_regions_and_end(self._segments, offset, max_bytes, lso, min_one_batch)
        aborted = collect_aborted_transactions(self._segments, offset, upper) if regions else []
        return FetchDataInfo(offset, regions, sum(r.length for r in regions), aborted)

    def collect_aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        return collect_aborted_transactions(self._segments, start, upper)

    def read_bytes(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> bytes:
        info = self.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        return b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)

    # ---- time lookups -------------------------------------------------------------------------

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after log start with timestamp >= target."""
        return find_offset_by_timestamp(self._segments, timestamp, self._log_start_offset, self._tp)

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """``(max timestamp, offset of the first record holding it)`` over the log, ``(-1, -1)`` when empty."""
        return max_timestamp_and_offset(self._segments, self._log_start_offset, self._tp)
