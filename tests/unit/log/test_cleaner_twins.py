"""The log cleaner gives the same cleaned log whether it reads keys with the compiled
``rill.records._key_scan`` or its pure-Python twin, on random logs (short and long keys, records without a
key, tombstones, idempotent producers, committed and aborted transactions, every codec, offset maps too
small for the log); and the cleaned log holds exactly the last value of each key."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logtest_util import small_config

from rill.log.cleaner_offset_map import OffsetMap
from rill.log.log import Log
from rill.log.log_cleaner import OffsetMapTooSmallError
from rill.log.log_cleaner_manager import CleanerConfig, LogCleaner
from rill.log.log_config import LogConfig
from rill.records import key_scan
from rill.records.batch import crc_ok, iter_batches
from rill.records.builder import build_batch
from rill.records.record import Record, decode_records_in

pytestmark = pytest.mark.timeout(300)

NOW = 1_700_000_000_000
RETENTION = 1000
KEYS = ["a", "b", "c", "a key of more than sixteen bytes", "another key longer than a digest"]


@contextlib.contextmanager
def pure_python() -> Iterator[None]:
    """The cleaner with the pure-Python twins, as where the package was built without a compiler."""
    saved = key_scan.KeyTable, key_scan.key_digest, key_scan.map_keys, key_scan.kept_records
    key_scan.KeyTable, key_scan.key_digest = key_scan.PyKeyTable, key_scan.py_key_digest
    key_scan.map_keys, key_scan.kept_records = key_scan.py_map_keys, key_scan.py_kept_records
    try:
        yield
    finally:
        key_scan.KeyTable, key_scan.key_digest, key_scan.map_keys, key_scan.kept_records = saved


def config(policy: str) -> LogConfig:
    return small_config(cleanup_policy=policy, segment_bytes=700, delete_retention_ms=RETENTION)  # type: ignore[arg-type]


VALUES = ["x", "yy", "z" * 30]
pair = st.tuples(st.one_of(st.none(), st.sampled_from(KEYS)), st.one_of(st.none(), st.sampled_from(VALUES)))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.lists(pair, min_size=1, max_size=5), st.sampled_from([0, 1, 3, 4])),
        st.tuples(st.just("idempotent"), st.lists(pair, min_size=1, max_size=5), st.sampled_from([0, 4])),
        st.tuples(st.just("txn"), st.sampled_from([1, 2]), st.lists(st.lists(pair, min_size=1, max_size=4),
                  min_size=1, max_size=3), st.sampled_from([0, 1, 4]), st.booleans()),
    ),
    min_size=1,
    max_size=25,
)  # fmt: skip

Written = dict[int, tuple[bytes | None, bytes | None, bool]]  # offset -> (key, value, aborted)


def write_log(path: Path, steps: list[tuple[object, ...]]) -> Written:
    """The log the steps make, written as a topic with ``cleanup.policy=delete`` (which takes records
    without a key), then rolled: all of it cleanable once the topic is compacted."""
    log = Log(path, config("delete"))
    written: Written = {}
    seqs = {1: 0, 2: 0, 3: 0}

    def append(pairs: list[tuple[str | None, str | None]], codec: int, pid: int = -1, txn: bool = False,
               aborted: bool = False) -> None:  # fmt: skip
        records = [Record(0, NOW + i, None if k is None else k.encode(), None if v is None else v.encode())
                   for i, (k, v) in enumerate(pairs)]  # fmt: skip
        seq = seqs[pid] if pid >= 0 else -1
        batch = build_batch(records, compression=codec, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                            base_sequence=seq, is_transactional=txn)  # fmt: skip
        first = log.append(bytearray(batch), leader_epoch=0, now_ms=NOW).first_offset
        if pid >= 0:
            seqs[pid] += len(records)
        for j, r in enumerate(records):
            written[first + j] = (r.key, r.value, aborted)
        log.high_watermark = log.log_end_offset

    for step in steps:
        if step[0] == "plain":
            append(step[1], step[2])  # type: ignore[arg-type]
        elif step[0] == "idempotent":
            append(step[1], step[2], pid=3)  # type: ignore[arg-type]
        else:
            _, pid, batches, codec, commit = step
            for pairs in batches:  # type: ignore[attr-defined]
                append(pairs, codec, pid=pid, txn=True, aborted=not commit)  # type: ignore[arg-type]
            log.append_txn_marker(pid, 0, 0, bool(commit), leader_epoch=0)  # type: ignore[arg-type]
            log.high_watermark = log.log_end_offset
    log.roll(now_ms=NOW)
    log.high_watermark = log.log_end_offset
    log.close()
    return written


def clean_copy(source: Path, target: Path, slots: int, now: int, twins: bool) -> tuple[object, dict[str, bytes]]:
    """Clean a copy of the log at ``source`` twice (at ``now``, then past the delete retention, each from the
    log start); (what each cleaning returned or raised, the segment files after)."""
    shutil.copytree(source, target)
    log = Log(target, config("compact"))
    log.high_watermark = log.log_end_offset
    outcomes: list[object] = []
    try:
        with pure_python() if twins else contextlib.nullcontext():
            for at in (now, now + RETENTION + 1):
                try:
                    result = LogCleaner(CleanerConfig()).clean_now(log, OffsetMap(slots), at)
                    outcomes.append(None if result is None else (result.map_end, result.records_removed))
                except OffsetMapTooSmallError as e:
                    outcomes.append(str(e))
        files = {p.name: p.read_bytes() for p in sorted(target.iterdir()) if p.suffix in (".log", ".index",
                 ".timeindex", ".txnindex")}  # fmt: skip
    finally:
        log.close()
    return outcomes, files


def data_records(files: dict[str, bytes]) -> list[Record]:
    out: list[Record] = []
    for name in sorted(n for n in files if n.endswith(".log")):
        assert all(crc_ok(files[name], pos, h) for pos, h in iter_batches(files[name]))
        out += decode_records_in(files[name])
    return out


@settings(max_examples=60, deadline=None)
@given(ops, st.sampled_from([2, 4, 100]), st.integers(0, 3000))
def test_compiled_and_pure_python_cleanings_give_the_same_log(steps: list[tuple[object, ...]], slots: int,
                                                              now_step: int) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "t-0"
        written = write_log(source, steps)
        now = NOW + now_step
        compiled = clean_copy(source, Path(tmp) / "c" / "t-0", slots, now, twins=False)
        python = clean_copy(source, Path(tmp) / "p" / "t-0", slots, now, twins=True)
        assert compiled[0] == python[0]
        assert compiled[1] == python[1]  # byte for byte
        files = compiled[1]
        if slots < 100:
            return
        # the map held every key: each key keeps exactly its last record (aborted ones and records without
        # a key gone); after the delete retention, its tombstone goes too
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for offset in sorted(written):
            key, value, aborted = written[offset]
            if key is not None and not aborted:
                latest[key] = (offset, value)
        got = [(r.offset, r.key, r.value) for r in data_records(files)]
        expected = sorted((o, k, v) for k, (o, v) in latest.items() if v is not None)
        assert sorted(got) == expected


def test_one_known_log_gives_the_same_cleaning_both_ways(tmp_path: Path) -> None:
    # every kind of batch at once, long and short keys, all codecs: a fixed case beside the random ones
    steps: list[tuple[object, ...]] = [
        ("plain", [("a", "x"), ("a key of more than sixteen bytes", "yy"), (None, "x")], 0),
        ("txn", 1, [[("b", "x"), ("a", "yy")]], 4, False),
        ("idempotent", [("c", "x"), ("a", None)], 4),
        ("txn", 2, [[("c", "z" * 30)], [("b", None)]], 1, True),
        ("plain", [("a key of more than sixteen bytes", None), ("b", "x")], 3),
        ("plain", [("a", "yy")], 1),
    ]
    written = write_log(tmp_path / "t-0", steps)
    compiled = clean_copy(tmp_path / "t-0", tmp_path / "c" / "t-0", 100, NOW, twins=False)
    python = clean_copy(tmp_path / "t-0", tmp_path / "p" / "t-0", 100, NOW, twins=True)
    assert compiled == python
    assert len(written) == 12
    kept = sorted((r.key, r.value) for r in data_records(compiled[1]))
    assert kept == [(b"a", b"yy"), (b"b", b"x"), (b"c", b"z" * 30)]
