"""``rill dump-log PATH...``: print the batches of ``.log`` segment files, the entries of ``.index``,
``.timeindex`` and ``.txnindex`` files and the producers of ``.snapshot`` files, like Kafka's DumpLogSegments.
A control batch's record is shown as its transaction marker (``endTxnMarker: COMMIT coordinatorEpoch: 3``).

A directory argument dumps every such file in it, in name order. Bytes after the last valid
batch are reported, not fatal. Exit status: 0, or 1 when a file could not be read or is damaged.
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from rill.cli._common import new_parser, run_main
from rill.errors import KafkaError
from rill.log.log_cleaner import DELETE_HORIZON_MASK
from rill.log.offset_index import OffsetIndex
from rill.log.producer_state import read_snapshot
from rill.log.time_index import TimeIndex
from rill.log.transaction_index import ENTRY_SIZE
from rill.records.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, crc_ok, parse_header

CODECS = {0: "NONE", 1: "GZIP", 2: "SNAPPY", 3: "LZ4", 4: "ZSTD"}
_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def _base_offset(path: Path) -> int:
    stem = path.name.split(".")[0]
    return int(stem) if stem.isdigit() else 0


def dump_log_file(path: Path, out: TextIO, *, print_records: bool) -> bool:
    """Print every batch; returns False when a batch fails its CRC or the file ends in bytes that are not a
    batch."""
    out.write(f"Dumping {path}\n")
    size = path.stat().st_size
    if size == 0:
        return True
    all_valid = True
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
        view = memoryview(mm)
        try:
            pos = 0
            while pos + BATCH_HEADER_SIZE <= size:
                h = parse_header(view, pos)
                if h.magic != MAGIC_V2 or h.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or pos + h.size > size:
                    break
                valid = crc_ok(view, pos, h)
                all_valid = all_valid and valid
                ts_type = "LogAppendTime" if h.timestamp_type else "CreateTime"
                # the log cleaner's mark on a batch keeping tombstones: when they may go
                horizon = f"deleteHorizonMs: {h.base_timestamp} " if h.attributes & DELETE_HORIZON_MASK else ""
                out.write(
                    f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                    f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
                    f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
                    f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                    f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
                    f"position: {pos} {ts_type}: {h.max_timestamp} {horizon}size: {h.size} "
                    f"magic: {h.magic} compresscodec: {CODECS.get(h.compression, h.compression)} "
                    f"crc: {h.crc} isvalid: {str(valid).lower()}\n"
                )
                if print_records and valid:
                    _print_records(bytes(view[pos : pos + h.size]), out, control=h.is_control)
                elif print_records:
                    out.write("| records not printed: the batch fails its CRC\n")
                pos += h.size
        finally:
            view.release()
    if pos != size:
        what = "a torn or damaged tail" if pos else "no record batch at the start: not a segment, or damaged throughout"
        out.write(f"Found {size - pos} invalid bytes at position {pos} ({what})\n")
        return False
    return all_valid


def _print_records(batch: bytes, out: TextIO, *, control: bool = False) -> None:
    from rill.records.control import describe_control_record
    from rill.records.record import decode_batch_records

    try:
        for r in decode_batch_records(batch, verify_crc=False):
            if control:
                out.write(
                    f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: {len(r.key or b'')} "
                    f"valueSize: {len(r.value or b'')} {describe_control_record(r.key, r.value)}\n"
                )
                continue
            key = r.key.decode("utf-8", "replace") if r.key is not None else "null"
            # a null value is a tombstone: a compacted topic's deletion of its key
            payload = r.value.decode("utf-8", "replace") if r.value is not None else "null (tombstone)"
            key_size = len(r.key) if r.key is not None else -1
            value_size = len(r.value) if r.value is not None else -1
            out.write(
                f"| offset: {r.offset} CreateTime: {r.timestamp} keySize: {key_size} valueSize: {value_size} "
                f"headerKeys: {[k for k, _ in r.headers]} key: {key} payload: {payload}\n"
            )
    except KafkaError as e:
        out.write(f"| cannot decode records: {e}\n")


def dump_index_file(path: Path, out: TextIO) -> bool:
    """Print the used entries (read-only: unused, zero slots of a preallocated index are skipped)."""
    out.write(f"Dumping {path}\n")
    base = _base_offset(path)
    entry = OffsetIndex.ENTRY if path.suffix == ".index" else TimeIndex.ENTRY
    data = path.read_bytes()
    zero = bytes(entry.size)
    for pos in range(0, len(data) - entry.size + 1, entry.size):
        if data[pos : pos + entry.size] == zero:
            break
        a, b = entry.unpack_from(data, pos)
        if path.suffix == ".index":
            out.write(f"offset: {base + a} position: {b}\n")
        else:
            out.write(f"timestamp: {a} offset: {base + b}\n")
    if len(data) % entry.size:
        out.write(f"Index file length {len(data)} is not a multiple of {entry.size}\n")
        return False
    return True


def dump_txn_index_file(path: Path, out: TextIO) -> bool:
    """Print the aborted transactions of a ``.txnindex`` file (``rill.log.transaction_index``)."""
    out.write(f"Dumping {path}\n")
    data = path.read_bytes()
    whole = len(data) - len(data) % ENTRY_SIZE
    ok = whole == len(data)
    for pos in range(0, whole, ENTRY_SIZE):
        version, pid, first, last, lso = struct.unpack_from(">hqqqq", data, pos)
        out.write(
            f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} lastStableOffset: {lso}\n"
        )
        ok = ok and version == 0
    if whole != len(data):
        out.write(f"Index file length {len(data)} is not a multiple of {ENTRY_SIZE}\n")
    return ok


def dump_snapshot_file(path: Path, out: TextIO) -> bool:
    out.write(f"Dumping {path}\n")
    try:
        producers = read_snapshot(path)
    except (ValueError, struct.error) as e:
        out.write(f"Invalid snapshot: {e}\n")
        return False
    for pid, entry in sorted(producers.items()):
        batch = entry.batches[-1] if entry.batches else None
        out.write(
            f"producerId: {pid} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} "
            f"firstSequence: {batch.first_seq if batch else -1} lastSequence: {entry.last_seq} "
            f"lastOffset: {entry.last_offset} lastTimestamp: {entry.last_timestamp} "
            f"currentTxnFirstOffset: {entry.current_txn_first_offset}\n"
        )
    return True


def dump_path(path: Path, out: TextIO, *, print_records: bool = False) -> bool:
    if path.is_dir():
        ok = True
        for child in sorted(path.iterdir()):
            if child.is_file() and child.name.endswith(_SUFFIXES):
                ok = dump_path(child, out, print_records=print_records) and ok
        return ok
    if path.suffix == ".log":
        return dump_log_file(path, out, print_records=print_records)
    if path.suffix in (".index", ".timeindex"):
        return dump_index_file(path, out)
    if path.suffix == ".txnindex":
        return dump_txn_index_file(path, out)
    if path.suffix == ".snapshot":
        return dump_snapshot_file(path, out)
    out.write(f"Skipping {path}: not a .log, .index, .timeindex, .txnindex or .snapshot file\n")
    return False


DESCRIPTION = (
    "Print the batches of .log segment files (transaction markers as such), the entries of .index, .timeindex "
    "and .txnindex files and the producers of .snapshot files, like Kafka's DumpLogSegments. A directory "
    "argument dumps every such file in it."
)


def _body(argv: list[str]) -> int:
    parser = new_parser("rill dump-log", DESCRIPTION)
    parser.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="segment, index or snapshot files, or partition dirs"
    )
    parser.add_argument(
        "--print-data-log", "--deep-iteration", action="store_true", dest="records", help="print every record"
    )
    args = parser.parse_args(argv)
    ok = True
    for path in args.paths:
        try:
            if not path.exists():  # said before anything else about it ("not a .log file" hid the cause)
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
            ok = dump_path(path, sys.stdout, print_records=args.records) and ok
        except OSError as e:
            sys.stdout.flush()
            print(f"error: cannot read {path}: {e.strerror or e}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)
