"""Leader epoch -> start offset history of one partition (Kafka's LeaderEpochFileCache).

Persisted in ``leader-epoch-checkpoint`` (format in rill.log.checkpoints). Entries strictly
increase in both epoch and start offset.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rill.log.checkpoints import read_epoch_checkpoint, write_epoch_checkpoint

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def _last_epoch(epochs: list[tuple[int, int]]) -> int:
    return epochs[-1][0] if epochs else UNDEFINED_EPOCH


def _assigned(epochs: list[tuple[int, int]], epoch: int, start_offset: int) -> list[tuple[int, int]]:
    """``epochs`` once ``epoch`` starts at ``start_offset`` (``epochs`` itself when that changes nothing)."""
    if epoch < 0:
        return epochs
    if epochs and epochs[-1][0] == epoch and epochs[-1][1] <= start_offset:
        return epochs
    kept = [(e, o) for e, o in epochs if e < epoch and o < start_offset]
    return [*kept, (epoch, start_offset)]


class LeaderEpochFileCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            stored = read_epoch_checkpoint(path)
        except (OSError, ValueError) as e:
            log.warning("Ignoring unreadable %s: %s", path, e)
            stored = []
        # As Kafka loads the file: each entry assigned in turn, so a negative one, or one that does not follow
        # the entries before it (epochs and start offsets both increase), is dropped.
        self._epochs: list[tuple[int, int]] = []
        for epoch, offset in stored:
            if offset >= 0:
                self._epochs = _assigned(self._epochs, epoch, offset)
        if self._epochs != stored:
            log.warning("%s: entries %s do not increase; kept %s", path, stored, self._epochs)
        # the last epoch or UNDEFINED_EPOCH; an attribute, as every append reads it (_flush updates it)
        self.latest_epoch = _last_epoch(self._epochs)
        # checkpoint writes so far: they are not fsynced here; the log's next flush makes them durable
        self.writes = 0

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._epochs)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``; stale or conflicting entries are dropped."""
        epochs = _assigned(self._epochs, epoch, start_offset)
        if epochs is not self._epochs:
            self._epochs = epochs
            self._flush()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer: ``(epoch, end offset)`` for ``requested_epoch``.

        The end offset is the start offset of the first epoch above it, or the log end offset
        for the latest epoch; the returned epoch is the largest known epoch <= the requested one.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = [(e, o) for e, o in self._epochs if e > requested_epoch]
        lower = [(e, o) for e, o in self._epochs if e <= requested_epoch]
        if not higher:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if not lower:
            return requested_epoch, higher[0][1]
        return lower[-1][0], higher[0][1]

    def epoch_for_offset(self, offset: int) -> int:
        epoch = UNDEFINED_EPOCH
        for e, o in self._epochs:
            if o > offset:
                break
            epoch = e
        return epoch

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [(e, o) for e, o in self._epochs if o < end_offset]
        if kept != self._epochs:
            self._epochs = kept
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly below ``start_offset``; the one covering it now starts there."""
        if not self._epochs or self._epochs[0][1] >= start_offset:
            return
        below = [(e, o) for e, o in self._epochs if o <= start_offset]
        above = [(e, o) for e, o in self._epochs if o > start_offset]
        self._epochs = [(below[-1][0], start_offset), *above]
        self._flush()

    def clear(self) -> None:
        self._epochs = []
        self._flush()

    def _flush(self) -> None:
        """Every change ends here: refresh ``latest_epoch``, then write the checkpoint (without
        fsync: ``Log.flush_segments`` syncs it before the recovery point moves)."""
        self.latest_epoch = _last_epoch(self._epochs)
        write_epoch_checkpoint(self.path, self._epochs, sync=False)
        self.writes += 1
