"""Property test: random appends, rolls, reads, truncations, retention and restarts (clean, and
crashed with a torn write at the tail) against a simple model of the log."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from logtest_util import BASE_TS, all_records, make_batch, small_config

from rill.errors import ErrorCode, KafkaError
from rill.log.log import Log

CONFIG = small_config(segment_bytes=700, index_interval_bytes=150, segment_index_bytes=64)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.dir = self.tmp / "prop-0"
        self.log = Log(self.dir, CONFIG)
        self.batches: list[tuple[int, int, int]] = []  # (base offset, count, tag)
        self.lso = 0
        self.leo = 0
        self.tag = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def expected(self) -> list[tuple[int, bytes | None]]:
        out = []
        for base, n, tag in self.batches:
            for i in range(n):
                if base + i >= self.lso:
                    out.append((base + i, bytes([(tag + i) % 256]) * (tag % 37)))
        return out

    @rule(n=st.integers(1, 6), writable=st.booleans())
    def append(self, n: int, writable: bool) -> None:
        self.tag += 1
        batch = make_batch(n, tag=self.tag, value_size=self.tag % 37, ts=BASE_TS + self.tag)
        # a Produce hands over a writable buffer (patched in place); other callers read-only bytes
        info = self.log.append(bytearray(batch) if writable else batch, leader_epoch=0)
        assert info.first_offset == self.leo
        self.batches.append((self.leo, n, self.tag))
        self.leo += n

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def read_somewhere(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(max(0, self.lso - 2), self.leo + 2))
        max_bytes = data.draw(st.integers(1, 3000))
        if offset < self.lso or offset > self.leo:
            with pytest.raises(KafkaError) as e:
                self.log.read(offset, max_bytes)
            assert e.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
            return
        info = self.log.read(offset, max_bytes)
        if offset == self.leo:
            assert info.size == 0
        else:
            assert info.size > 0 and (info.size <= max_bytes or len(info.regions) == 1)

    @precondition(lambda self: self.leo > self.lso)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.lso, self.leo))
        self.log.truncate_to(target)
        kept = [b for b in self.batches if b[0] + b[1] - 1 < target]
        self.batches = kept
        self.leo = kept[-1][0] + kept[-1][1] if kept else 0
        if self.leo < self.lso:  # the cut fell inside the batch holding the log start
            self.batches, self.leo = [], self.lso
        assert self.log.log_end_offset == self.leo

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        self.log.high_watermark = self.leo
        target = data.draw(st.integers(self.lso, self.leo))
        self.log.maybe_increment_log_start_offset(target)
        self.lso = target
        assert self.log.log_start_offset == target

    @rule(limit=st.integers(0, 2000))
    def retention_bytes(self, limit: int) -> None:
        self.log.high_watermark = self.leo
        self.log.config = small_config(segment_bytes=700, index_interval_bytes=150, retention_bytes=limit)
        self.log.delete_old_segments()
        self.log.config = CONFIG
        self.lso = self.log.log_start_offset

    @rule(clean=st.booleans(), garbage=st.binary(max_size=200))
    def restart(self, clean: bool, garbage: bytes) -> None:
        hw = self.log.high_watermark
        self.log.close(clean=clean)
        if not clean and garbage:
            last = sorted(self.dir.glob("*.log"))[-1]
            with open(last, "ab") as f:  # a torn, never acknowledged write
                f.write(garbage)
        self.log = Log(
            self.dir,
            CONFIG,
            log_start_offset=self.lso,
            recovery_point=0,
            high_watermark=hw,
            had_clean_shutdown=clean,
        )
        assert self.log.log_end_offset == self.leo

    @invariant()
    def reads_back_exactly(self) -> None:
        assert self.log.log_start_offset == self.lso
        assert self.log.log_end_offset == self.leo
        got = [(r.offset, r.value) for r in all_records(self.log)]
        assert got == self.expected()
        assert not any(n.endswith(".tmp") for n in os.listdir(self.dir))


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(
    max_examples=int(os.environ.get("LOG_PROP_EXAMPLES", "40")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
