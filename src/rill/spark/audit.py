"""The audit: producers count what they send per topic and time window; the audit compares with what the
loader published.

Producer side (any client)::

    counter = AuditCounter(window_ms=60_000)
    ts, headers = counter.stamp("page-views")           # count it, and stamp time and host
    producer.produce("page-views", value, timestamp=ts, headers=headers)
    ...
    counter.publish(rill_producer, "_audit")              # periodically: the counts since the last publish

Each audit record has the topic as key and a JSON value ``{"topic", "window_start_ms", "window_ms", "host",
"count"}``; counts of one window may come in several records (hosts, publishes) and are summed.
``compare`` then reports every (topic, window) where the audited count and the loaded count differ. The
window of a loaded record is taken from its timestamp, which is the stamped time. An audit with nothing to
compare (no audit topic, no counts in it, no output directory) raises ``NothingToAudit``: it is not a pass.
"""

from __future__ import annotations

import json
import socket
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rill.client.client import KafkaClient
from rill.client.producer import IdempotentProducer
from rill.errors import ErrorCode, KafkaError
from rill.records.record import decode_records_in

HOST_HEADER = "rill.audit.host"

WindowKey = tuple[str, int]  # (topic, window start ms)


@dataclass(frozen=True, slots=True)
class WindowDiff:
    topic: str
    window_start_ms: int
    produced: int
    loaded: int

    def __str__(self) -> str:
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.window_start_ms / 1000))
        return f"{self.topic} window {start}: produced {self.produced}, loaded {self.loaded}"


class AuditCounter:
    def __init__(self, *, window_ms: int = 60_000, host: str | None = None) -> None:
        self.window_ms = window_ms
        self.host = host or socket.gethostname()
        self._host_header = [(HOST_HEADER, self.host.encode())]
        self._counts: dict[WindowKey, int] = defaultdict(int)

    def stamp(self, topic: str, now_ms: int | None = None) -> tuple[int, list[tuple[str, bytes | None]]]:
        """Count one event of ``topic``; returns the timestamp and headers to produce it with."""
        ts = int(time.time() * 1000) if now_ms is None else now_ms
        self._counts[(topic, ts - ts % self.window_ms)] += 1
        return ts, list(self._host_header)

    def pending(self) -> dict[WindowKey, int]:
        return dict(self._counts)

    def publish(self, producer: IdempotentProducer, audit_topic: str) -> int:
        """Send the counts since the last publish to ``audit_topic``; returns how many records were sent."""
        sent = 0
        for (topic, start), count in sorted(self._counts.items()):
            value = {
                "topic": topic,
                "window_start_ms": start,
                "window_ms": self.window_ms,
                "host": self.host,
                "count": count,
            }
            producer.send(audit_topic, json.dumps(value).encode(), topic.encode())
            sent += 1
        producer.flush()
        self._counts.clear()
        return sent


def read_audit_counts(client: KafkaClient, audit_topic: str) -> tuple[dict[WindowKey, int], int]:
    """Sum of audited counts per (topic, window) from the whole audit topic; also returns the window size."""
    tps = client.partitions_for(audit_topic)
    offsets = client.earliest_offsets(tps)
    ends = client.latest_offsets(tps)
    counts: dict[WindowKey, int] = defaultdict(int)
    window_ms = 0
    for tp in tps:
        pos = offsets[tp]
        while pos < ends[tp]:
            fetched = client.fetch({tp: pos})[tp]
            if fetched.error != ErrorCode.NONE:
                raise KafkaError(fetched.error, f"cannot read the audit topic's {tp} at offset {pos}")
            records = [r for r in decode_records_in(fetched.records) if r.offset >= pos]
            if not records:
                break
            for r in records:
                if r.offset >= ends[tp] or r.value is None:
                    continue
                obj = json.loads(r.value)
                counts[(str(obj["topic"]), int(obj["window_start_ms"]))] += int(obj["count"])
                window_ms = int(obj["window_ms"])
            pos = records[-1].offset + 1
    return dict(counts), window_ms


def loaded_counts(output: str | Path, window_ms: int, topics: Iterable[str] | None = None) -> dict[WindowKey, int]:
    """Records per (topic, window) in the loader's published output, read with pyarrow (not Spark)."""
    import numpy as np
    import pyarrow as pa

    from rill.spark.loader import read_published

    table = read_published(output, columns=["topic", "timestamp"])
    if table is None or table.num_rows == 0:
        return {}
    ms = table.column("timestamp").cast(pa.timestamp("ms")).cast(pa.int64()).to_numpy()
    starts = ms - np.mod(ms, window_ms)
    counts: dict[WindowKey, int] = defaultdict(int)
    wanted = set(topics) if topics is not None else None
    for topic, start in zip(table.column("topic").to_pylist(), starts.tolist(), strict=True):
        if wanted is None or topic in wanted:
            counts[(str(topic), int(start))] += 1
    return dict(counts)


def compare(produced: dict[WindowKey, int], loaded: dict[WindowKey, int]) -> list[WindowDiff]:
    """Every audited window whose loaded count differs, in (topic, window) order."""
    diffs = []
    for key in sorted(produced):
        got = loaded.get(key, 0)
        if got != produced[key]:
            diffs.append(WindowDiff(key[0], key[1], produced[key], got))
    return diffs


class NothingToAudit(Exception):
    """The audit could check nothing: the audit topic does not exist or holds no counts, or the output
    directory does not exist. Not a pass: an empty comparison proves nothing."""


def run_audit(client: KafkaClient, audit_topic: str, output: str | Path) -> list[WindowDiff]:
    """Every (topic, window) whose loaded count differs from the audited one; raises ``NothingToAudit``
    when there is nothing to compare."""
    if not Path(output).is_dir():
        raise NothingToAudit(f"the output directory {output} does not exist: nothing was loaded there")
    try:
        produced, window_ms = read_audit_counts(client, audit_topic)
    except KafkaError as e:
        if e.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
        raise NothingToAudit(f"the audit topic {audit_topic!r} does not exist: nothing was checked") from None
    if not produced:
        raise NothingToAudit(f"the audit topic {audit_topic!r} holds no counts: nothing was checked")
    topics = {t for t, _ in produced}
    return compare(produced, loaded_counts(output, window_ms, topics))


__all__ = ["AuditCounter", "NothingToAudit", "WindowDiff", "compare", "loaded_counts", "read_audit_counts", "run_audit"]
