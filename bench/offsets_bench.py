"""``__consumer_offsets`` under many commits: the cleaner keeps it small, and a restart loads the groups quickly.

    python bench/offsets_bench.py [--commits N] [--groups N] [--partitions N] [--segment-bytes N]
                                  [--backoff-ms N] [--dir DIR]

Starts a broker (``python -m rill broker``, its own process) with one ``__consumer_offsets`` partition of
``--segment-bytes`` (1 MiB) segments, and makes ``--commits`` (1,000,000) offset commits for ``--groups`` (10)
groups x ``--partitions`` (10) partitions of a topic through the real OffsetCommit path: each request of a
group carries one commit for each of its partitions (so 100,000 requests for 1,000,000 commits), sent over
one connection per group with up to ``WINDOW`` requests in flight. Then it waits until the cleaner has
compacted the log to at most ``MAX_SEGMENTS`` segments, stops the broker, starts it again and times how
long the groups take to load (the coordinator's own ``Loaded ... in X ms`` line, and the wall time from
the start of the broker process to an OffsetFetch that returns the last commits).

``run()`` is what the broker test of the same name calls with a smaller count.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rill.errors import ErrorCode
from rill.protocol import ApiKey, decode_response, encode_request

WINDOW = 64  # requests in flight on one connection
MAX_SEGMENTS = 3  # "at most a few segments": a cleaned one, perhaps a second, and the active one
TOPIC = "in"
COMMIT_VERSION = 8
FETCH_VERSION = 8


@dataclass(frozen=True, slots=True)
class OffsetsResult:
    commits: int
    requests: int
    commit_seconds: float
    segment_bytes_at_end: int  # of the log's segments when the last commit was answered
    cleaned_after_seconds: float  # from the last commit until the log had at most MAX_SEGMENTS segments
    segments: int
    log_bytes: int
    load_ms: float  # the coordinator's own figure, from its log line
    records_loaded: int
    restart_to_fetch_seconds: float  # broker process start to OffsetFetch answered with the last commits


class _Conn:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        self.corr += 1
        self.sock.sendall(encode_request(api_key, version, self.corr, "offsets-bench", body))
        return self.corr

    def receive(self, api_key: int, version: int) -> tuple[int, dict[str, Any]]:
        (size,) = struct.unpack(">i", self._exact(4))
        return decode_response(api_key, version, self._exact(size))

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        corr = self.send(api_key, version, body)
        got, resp = self.receive(api_key, version)
        assert got == corr
        return resp

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def expected_offset(round_: int, group: int, partition: int, partitions: int) -> int:
    """The offset commit number ``round_`` of ``group`` stores for ``partition``."""
    return round_ * partitions + partition + group


def _commit_rounds(bootstrap: str, group: int, rounds: int, partitions: int, errors: list[str]) -> None:
    conn = _Conn(bootstrap)
    group_id = f"g{group}"
    try:
        in_flight = 0
        for r in range(rounds):
            parts = [
                {"partition_index": p, "committed_offset": expected_offset(r, group, p, partitions),
                 "committed_metadata": ""}
                for p in range(partitions)
            ]  # fmt: skip
            body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
                    "topics": [{"name": TOPIC, "partitions": parts}]}  # fmt: skip
            conn.send(ApiKey.OFFSET_COMMIT, COMMIT_VERSION, body)
            in_flight += 1
            if in_flight >= WINDOW or r == rounds - 1:
                for _ in range(in_flight):
                    _, resp = conn.receive(ApiKey.OFFSET_COMMIT, COMMIT_VERSION)
                    codes = {p["error_code"] for t in resp["topics"] for p in t["partitions"]}
                    if codes != {ErrorCode.NONE}:
                        errors.append(f"{group_id}: OffsetCommit errors {sorted(codes)}")
                        return
                in_flight = 0
    finally:
        conn.close()


def fetch_committed(bootstrap: str, group: int, partitions: int) -> list[int]:
    conn = _Conn(bootstrap)
    try:
        body = {
            "groups": [
                {"group_id": f"g{group}", "topics": [{"name": TOPIC, "partition_indexes": list(range(partitions))}]}
            ]
        }
        resp = conn.call(ApiKey.OFFSET_FETCH, FETCH_VERSION, body)
        group_resp = resp["groups"][0]
        if group_resp["error_code"] != ErrorCode.NONE:
            return []
        found = {p["partition_index"]: p["committed_offset"] for t in group_resp["topics"] for p in t["partitions"]}
        return [found.get(p, -1) for p in range(partitions)]
    finally:
        conn.close()


def _segments(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob("*.log"))


def _segment_bytes(log_dir: Path) -> int:
    """The bytes of the log's segments now; the cleaner may delete one between the listing and its stat."""
    total = 0
    for path in _segments(log_dir):
        with contextlib.suppress(FileNotFoundError):
            total += path.stat().st_size
    return total


_LOADED = re.compile(r"Loaded (\d+) group\(s\) from (\d+) record\(s\) of __consumer_offsets in ([0-9.]+) ms")


def run(
    data_dir: Path,
    commits: int = 1_000_000,
    groups: int = 10,
    partitions: int = 10,
    segment_bytes: int = 1024 * 1024,
    backoff_ms: int = 15000,
    clean_timeout: float = 120.0,
    log: Any = print,
) -> OffsetsResult:
    """The whole run (see the module docstring); raises AssertionError when a commit fails, the log is not
    cleaned down to ``MAX_SEGMENTS`` in ``clean_timeout`` or a restart does not give the last commits back."""
    import rill.testing

    rounds = commits // (groups * partitions)
    assert rounds > 0, "fewer commits than groups x partitions"
    overrides = {
        "offsets.topic.num.partitions": "1",
        "offsets.topic.segment.bytes": str(segment_bytes),
        "log.cleaner.backoff.ms": str(backoff_ms),
        "num.partitions": str(partitions),
        "auto.create.topics.enable": "true",
    }
    b = rill.testing.broker(overrides, subprocess=True, data_dir=data_dir)
    with b as broker:
        bs = broker.bootstrap_servers
        conn = _Conn(bs)
        try:
            conn.call(ApiKey.METADATA, 12, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": True})
            deadline = time.monotonic() + 30
            for g in range(groups):  # the first makes __consumer_offsets; each waits until its group is served
                while conn.call(ApiKey.FIND_COORDINATOR, 3, {"key": f"g{g}", "key_type": 0})["error_code"]:
                    assert time.monotonic() < deadline, "no coordinator"
                    time.sleep(0.05)
        finally:
            conn.close()
        errors: list[str] = []
        threads = [
            threading.Thread(target=_commit_rounds, args=(bs, g, rounds, partitions, errors)) for g in range(groups)
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        commit_seconds = time.monotonic() - started
        assert not errors, errors[:5]
        done = rounds * groups * partitions
        log(f"{done:,} offset commits ({rounds * groups:,} requests) in {commit_seconds:.1f} s:"
            f" {done / commit_seconds:,.0f} commits/s")  # fmt: skip
        offsets_dir = data_dir / "logs" / "__consumer_offsets-0"
        written = _segment_bytes(offsets_dir)
        waited = time.monotonic()
        deadline = waited + clean_timeout
        while len(_segments(offsets_dir)) > MAX_SEGMENTS and time.monotonic() < deadline:
            time.sleep(0.2)
        cleaned_after = time.monotonic() - waited
        segments = _segments(offsets_dir)
        size = _segment_bytes(offsets_dir)
        assert len(segments) <= MAX_SEGMENTS, f"{len(segments)} segments after {clean_timeout} s"
        log(f"cleaned to {len(segments)} segments, {size:,} bytes, {cleaned_after:.1f} s after the last commit"
            f" ({written:,} bytes of segments at that moment)")  # fmt: skip
        broker.stop()
        log_path = data_dir / "broker.log"
        before = len(log_path.read_text(errors="replace")) if log_path.exists() else 0
        restarted = time.monotonic()
        broker.start()
        last = [expected_offset(rounds - 1, g, p, partitions) for g in range(groups) for p in range(partitions)]
        got: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = [o for g in range(groups) for o in fetch_committed(broker.bootstrap_servers, g, partitions)]
            if got == last:
                break
            time.sleep(0.01)
        to_fetch = time.monotonic() - restarted
        assert got == last, "a restart did not give the last commits back"
        text = log_path.read_text(errors="replace")[before:]
        matches = _LOADED.findall(text)
        assert matches, "no 'Loaded ... group(s)' line after the restart"
        n_groups, n_records, ms = matches[-1]
        assert int(n_groups) == groups
        log(f"restart: {n_groups} groups loaded from {int(n_records):,} records in {float(ms):.1f} ms;"
            f" {to_fetch:.2f} s from the broker process' start to the last commits fetched")  # fmt: skip
    return OffsetsResult(done, rounds * groups, commit_seconds, written, cleaned_after, len(segments), size,
                         float(ms), int(n_records), to_fetch)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--segment-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--backoff-ms", type=int, default=15000, help="log.cleaner.backoff.ms (Kafka's default)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="offsets-bench-", dir=args.dir) as d:
        run(Path(d) / "data", args.commits, args.groups, args.partitions, args.segment_bytes, args.backoff_ms)


if __name__ == "__main__":
    main()
