"""The segment's write-side state: the compiled ``rill.log._segment`` and its pure-Python twin in
``rill.log.segment_state`` write the same files and keep the same state through the same operations
(appends that roll on size, time and full indexes, index blocks reserved a few entries at a time,
truncations, clean and unclean reopens, a full disk)."""

from __future__ import annotations

import importlib
import os
import random
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rill.log
from rill.errors import KafkaError
from rill.log import abstract_index, log_segment, segment_state
from rill.log.log import Log
from rill.log.log_config import LogConfig
from rill.records.builder import build_batch
from rill.records.record import Record

BASE_TS = 1_700_000_000_000
# every module that holds LogSegment or the index classes, in import order
TWINNED = ["segment_state", "abstract_index", "offset_index", "time_index", "log_segment", "log_reader",
           "log_loader", "log_retention", "log"]


def _import_pure() -> dict[str, ModuleType]:
    """Fresh copies of the TWINNED modules with the extension blocked (they take the Python twin);
    the modules in use stay as they were."""
    names = [f"rill.log.{n}" for n in TWINNED]
    saved = {n: sys.modules.pop(n) for n in names if n in sys.modules}
    saved_ext = sys.modules.get("rill.log._segment")
    sys.modules["rill.log._segment"] = None  # type: ignore[assignment]  # import now raises ImportError
    try:
        fresh = {n.rsplit(".", 1)[1]: importlib.import_module(n) for n in names}
    finally:
        for n in names:
            sys.modules.pop(n, None)
        sys.modules.update(saved)
        if saved_ext is None:
            sys.modules.pop("rill.log._segment", None)
        else:
            sys.modules["rill.log._segment"] = saved_ext
        for n, module in saved.items():
            setattr(rill.log, n.rsplit(".", 1)[1], module)
    assert not fresh["segment_state"].ACCELERATED
    return fresh


PURE = _import_pure()


def test_the_compiled_state_is_in_use_and_the_twin_is_python() -> None:
    assert segment_state.ACCELERATED, "rill.log._segment was not built: pip install -e . needs gcc and Python.h"
    assert log_segment.LogSegment.__mro__[1].__module__ == "rill.log._segment"
    assert PURE["log_segment"].LogSegment.__mro__[1] is PURE["segment_state"].PySegmentState
    assert PURE["log"].Log is not Log


@pytest.fixture
def small_reserve() -> Iterator[None]:
    """Index blocks reserved two entries at a time in both implementations, so the compiled path
    often finds no room and hands over to the Python one."""
    saved = abstract_index.RESERVE_CHUNK, PURE["abstract_index"].RESERVE_CHUNK
    abstract_index.RESERVE_CHUNK = PURE["abstract_index"].RESERVE_CHUNK = 24
    try:
        yield
    finally:
        abstract_index.RESERVE_CHUNK, PURE["abstract_index"].RESERVE_CHUNK = saved


def _batch(n: int, value_size: int, ts: int, step: int, tag: int) -> bytes:
    return build_batch([Record(0, -1 if ts < 0 else ts + i * step, b"k%d" % tag, bytes([tag % 256]) * value_size)
                        for i in range(n)])


def _state(log: Any) -> list[tuple[object, ...]]:
    out = []
    for seg in log.segments:
        out.append((seg.base_offset, seg.size, seg.next_offset, seg.max_timestamp, seg.offset_of_max_timestamp,
                    seg.bytes_since_last_index_entry, seg.index_full, seg.rolling_based_timestamp, seg.created_ms,
                    seg.roll_jitter_ms))
        for index in (seg.offset_index, seg.time_index):
            out.append((index.base_offset, index.entry_size, index._entries, index._max_entries, index._reserved,
                        index._last, index.entries and index.all_entries()))
    return out


def _files(d: Path) -> dict[str, bytes]:
    # segments deleted by a roll or truncation go when a timer says; what is left is compared
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file() and not p.name.endswith(".deleted")}


def _outcome(root: Path, fn: Any, *args: Any, **kw: Any) -> object:
    try:
        result = fn(*args, **kw)
    except (KafkaError, OSError, ValueError) as e:
        return ("error", type(e).__name__, str(e).replace(str(root), ""))
    return result


appends = st.tuples(
    st.integers(1, 12),  # records
    st.sampled_from([1, 40, 300, 1500]),  # value size
    st.sampled_from([-1, 0, 5, 30_000, -30_000]),  # timestamp shift from the previous batch's (-1: none)
    st.integers(0, 3),  # timestamp step between records
)
ops = st.one_of(
    *[st.tuples(st.just("append"), appends)] * 6,
    st.tuples(st.just("truncate"), st.integers(0, 200)),
    st.tuples(st.just("reopen"), st.booleans()),
    st.tuples(st.just("roll"), st.none()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(ops, min_size=10, max_size=80),
    segment_bytes=st.sampled_from([2_000, 6_000, 100_000]),
    index_interval=st.sampled_from([0, 100, 4096]),
    index_bytes=st.sampled_from([24, 48, 96, 4096]),
    segment_ms=st.sampled_from([50, 10**9]),
    jitter_ms=st.sampled_from([0, 40]),
)
def test_compiled_and_python_segments_write_the_same_files(
    tmp_path_factory: pytest.TempPathFactory, small_reserve: None, steps: list[tuple[str, Any]],
    segment_bytes: int, index_interval: int, index_bytes: int, segment_ms: int, jitter_ms: int,
) -> None:
    root = tmp_path_factory.mktemp("twin")
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval,
                       segment_index_bytes=index_bytes, segment_ms=segment_ms, segment_jitter_ms=jitter_ms,
                       file_delete_delay_ms=0,
                       max_message_bytes=1 << 20)
    kinds = {"c": (Log, root / "c" / "t-0"), "py": (PURE["log"].Log, root / "py" / "t-0")}
    now, ts, tag = BASE_TS, BASE_TS, 0
    topic_id = uuid.uuid4()
    # both implementations draw the same segment jitters: the generator is seeded alike before each
    logs = {}
    for k, (cls, d) in kinds.items():
        random.seed(0)
        logs[k] = cls(d, config, topic_id=topic_id, now_ms=now)
    try:
        for i, (op, arg) in enumerate(steps):
            now += 7
            results = {}
            for k, log in logs.items():
                random.seed(i + 1)
                where = kinds[k][1].parent
                if op == "append":
                    n, size, shift, step = arg
                    batch = _batch(n, size, -1 if shift == -1 else ts + shift, step, tag)
                    results[k] = _outcome(where, log.append, memoryview(bytearray(batch)), leader_epoch=0, now_ms=now)
                elif op == "truncate":
                    results[k] = _outcome(where, log.truncate_to, arg, now_ms=now)
                elif op == "roll":
                    results[k] = _outcome(where, lambda log=log, now=now: log.roll(now_ms=now).base_offset)
                else:
                    results[k] = log.close(clean=arg)
                    logs[k] = kinds[k][0](kinds[k][1], config, topic_id=topic_id, had_clean_shutdown=arg, now_ms=now)
            if op == "append":
                tag += 1
                if arg[2] != -1:
                    ts += arg[2]
            assert results["c"] == results["py"], (op, arg)
            assert _state(logs["c"]) == _state(logs["py"]), (op, arg)
        assert _files(kinds["c"][1]) == _files(kinds["py"][1])
    finally:
        for log in logs.values():
            log.close()


@pytest.mark.parametrize("impl", ["c", "py"])
def test_a_full_disk_cuts_the_failed_write_back_in_both(tmpfs: Path, impl: str) -> None:
    """On a real full tmpfs the write that fails leaves the file as it was, compiled or not."""
    cls = Log if impl == "c" else PURE["log"].Log
    config = LogConfig(segment_bytes=10**8, segment_index_bytes=4096)
    log = cls(tmpfs / "t-0", config)
    acked = 0
    with pytest.raises(KafkaError):
        for i in range(10_000):
            acked = log.append(memoryview(bytearray(_batch(4, 1000, BASE_TS, 1, i))), leader_epoch=0).last_offset
    seg = log.segments[-1]
    assert os.path.getsize(seg.log_path) == seg.size == log.size_bytes
    assert log.log_end_offset == acked + 1 == seg.next_offset
    log.truncate_to(4)
    assert log.append(memoryview(bytearray(_batch(1, 10, BASE_TS, 1, 0))), leader_epoch=0).first_offset == 4
    log.close()


def test_bad_arguments_are_refused_alike(tmp_path: Path) -> None:
    for k, cls in (("c", Log), ("py", PURE["log"].Log)):
        log = cls(tmp_path / f"{k}-0", LogConfig())
        seg = log.segments[-1]
        with pytest.raises(ValueError):
            seg.try_append(bytearray(10), 0, 0, 0, 0, 0, 1000, 1000)
        with pytest.raises((BufferError, TypeError)):
            seg.try_append(bytes(100), 0, 0, 0, 0, 0, 1000, 1000)
        with pytest.raises(TypeError):
            seg.should_roll(1, 2, 3)  # type: ignore[call-arg]
        assert seg.size == 0 and os.path.getsize(seg.log_path) == 0
        log.close()


def test_write_all_finishes_partial_writes_and_refuses_a_write_of_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short writes (a signal, a nearly full disk) are continued where they stopped, past the
    iovec limit too; a write that makes no progress is an error, not a loop."""
    real = os.pwritev
    bufs = [bytes([i % 251]) * (i % 5) for i in range(2_500)]  # empty ones among them
    expected = b"".join(bufs)

    def short(fd: int, views: list[memoryview], offset: int) -> int:
        assert len(views) <= 1024
        return real(fd, [bytes(b"".join(views)[:7])], offset)

    monkeypatch.setattr(os, "pwritev", short)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        for chunk in (bufs[:3], bufs):
            os.ftruncate(fd, 0)
            data = b"".join(chunk)
            assert segment_state.write_all(fd, chunk, 0) == len(data)
            assert os.pread(fd, len(expected) + 1, 0) == data
        monkeypatch.setattr(os, "pwritev", lambda fd, views, offset: 0)
        with pytest.raises(OSError, match="wrote nothing"):
            segment_state.write_all(fd, [b"abc"], 0)
    finally:
        os.close(fd)
