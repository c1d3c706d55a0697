"""The offline loader: everything new in some topics since the last run, into Parquet, exactly once.

Layout of the output directory::

    OUTPUT/
      _loader.lock                      flock of the running loader, with its pid (one at a time; removed
                                        when the run ends; a file left by a killed run does not block)
      _staging/batch=000007/...         a run in progress (or the debris of a killed one; removed on start)
      batch=000001/
        _offsets.json                   the offsets manifest of this batch (below)
        topic=T/date=YYYY-MM-DD/part-*.parquet
      batch=000002/...

A run reads, for every partition of its topics, the offsets from where the last published batch ended (or
the partition's earliest offset) up to the offset that was latest when the run started, writes them with
Spark into ``_staging/batch=N`` partitioned by topic and date (UTC, from the record timestamp, whatever the
session time zone), writes the manifest there, and publishes data and manifest together with one ``rename``
of the batch directory. The offsets live with the data, so a run that dies at any point leaves either a
whole batch or nothing that counts, and the next run starts exactly where the last published manifest ends.
Record timestamps are standard Parquet timestamps (``TIMESTAMP_MICROS`` adjusted to UTC; pyarrow reads
``timestamp[us, tz=UTC]``), not Spark's legacy INT96.

Offsets the loader cannot load are reported as data loss (a ``WARNING`` line) and skipped: offsets deleted
before they were loaded (the run starts at the earliest offset), and a log that now ends before the loaded
position (the topic was deleted and recreated, or truncated: the run loads the new log from its earliest
offset).

Readers that are not Spark see only whole batches: pyarrow and DuckDB skip ``_``-prefixed paths
(``read_published`` below, ``read_parquet('OUTPUT/batch=*/*/*/*.parquet', hive_partitioning=true)``).
Partition values are text: read them as strings, as ``read_published`` does (inferring their types turns
a topic named ``007`` into the number 7).

``_offsets.json``: ``{"batch": 7, "created_ms": ..., "ranges": [{"topic": "T", "partition": 0,
"start": 100, "end": 250, "records": 150}, ...]}`` with ``end`` exclusive.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rill.common import TopicPartition
from rill.fsutil import fsync_dir, write_atomically
from rill.spark.option_names import security_options
from rill.spark.options import offsets_to_json
from rill.spark.utc import utc_date

if TYPE_CHECKING:
    from rill.client.security import ClientSecurity

OFFSETS_FILE = "_offsets.json"
STAGING_DIR = "_staging"
LOCK_FILE = "_loader.lock"
_BATCH_RE = re.compile(r"^batch=(\d{6,})$")
# The partition columns of the output, read as written (type inference would read topic=007 as 7).
STAGED_SCHEMA = "topic string, partition int, date string"
PARTITION_COLUMNS = ("batch", "topic", "date")
OUTPUT_TIMESTAMP_TYPE = "spark.sql.parquet.outputTimestampType"


@dataclass(frozen=True, slots=True)
class LoadedRange:
    topic: str
    partition: int
    start: int
    end: int
    records: int


@dataclass(frozen=True, slots=True)
class Manifest:
    batch: int
    created_ms: int
    ranges: tuple[LoadedRange, ...]
    # Typed topics: per topic, per column ("key", "value"), the reader schema the batch was written with
    # ({"subject", "version", "id"}).
    schemas: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def to_json(self) -> str:
        obj: dict[str, Any] = {
            "batch": self.batch,
            "created_ms": self.created_ms,
            "ranges": [asdict(r) for r in self.ranges],
        }
        if self.schemas:
            obj["schemas"] = self.schemas
        return json.dumps(obj, indent=1)

    @classmethod
    def from_json(cls, raw: str) -> Manifest:
        obj = json.loads(raw)
        return cls(
            int(obj["batch"]),
            int(obj["created_ms"]),
            tuple(LoadedRange(**r) for r in obj["ranges"]),
            dict(obj.get("schemas") or {}),
        )


def batch_dir_name(batch: int) -> str:
    return f"batch={batch:06d}"


def published_manifests(output: Path) -> list[Manifest]:
    """Manifests of the published batches, oldest first."""
    out: list[Manifest] = []
    if not output.is_dir():
        return out
    for entry in output.iterdir():
        if _BATCH_RE.match(entry.name) and (entry / OFFSETS_FILE).is_file():
            out.append(Manifest.from_json((entry / OFFSETS_FILE).read_text()))
    return sorted(out, key=lambda m: m.batch)


def loaded_positions(output: Path) -> dict[TopicPartition, int]:
    """Per topic-partition, the offset after the last published record range (where the next run starts)."""
    pos: dict[TopicPartition, int] = {}
    for m in published_manifests(output):
        for r in m.ranges:
            pos[TopicPartition(r.topic, r.partition)] = r.end
    return pos


def _lock_holder(fd: int) -> str:
    try:
        return os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


@contextlib.contextmanager
def _exclusive(output: Path) -> Iterator[None]:
    """Hold ``OUTPUT/_loader.lock`` (an ``flock``, with the holder's pid in the file) for one run.

    The lock file is removed when the run ends, however it ends (while still locked, so no other loader can
    hold the old file meanwhile). A file left by a killed loader does not block: the kernel released its
    ``flock`` when the process died, and the next run takes the file over. Only a live loader blocks."""
    path = output / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            os.close(fd)
            raise RuntimeError(
                f"another loader (pid {holder}) is running on {output}: it holds {path}; "
                "wait for it to finish (the lock goes with the process)"
            ) from None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = -1
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the previous holder removed this file as we opened it: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        os.close(fd)  # releases the flock


@contextlib.contextmanager
def _standard_timestamps(spark: Any) -> Iterator[None]:
    """Write timestamps as Parquet ``TIMESTAMP(MICROS, isAdjustedToUTC=true)``, which every reader takes as
    UTC instants, instead of Spark's default legacy INT96 (read elsewhere as naive nanoseconds)."""
    previous = spark.conf.get(OUTPUT_TIMESTAMP_TYPE)
    spark.conf.set(OUTPUT_TIMESTAMP_TYPE, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        spark.conf.set(OUTPUT_TIMESTAMP_TYPE, previous)


def publish(staging: Path, output: Path, manifest: Manifest) -> Path:
    """Write the manifest into the staged batch and move the batch into place with one rename."""
    write_atomically(staging / OFFSETS_FILE, manifest.to_json().encode())
    fsync_dir(staging)
    final = output / batch_dir_name(manifest.batch)
    os.rename(staging, final)
    fsync_dir(output)
    return final


def run_load(
    spark: Any,
    bootstrap_servers: str,
    topics: list[str],
    output: str | Path,
    *,
    group_id: str | None = None,
    say: Callable[[str], None] = print,
    before_publish: Callable[[Path], None] | None = None,
    schema_registry: str | None = None,
    security: ClientSecurity | None = None,
) -> Manifest | None:
    """One loader run; returns the published manifest, or None when there was nothing new. With
    ``schema_registry``, topics with a ``<topic>-value`` (``<topic>-key``) subject load typed columns.
    ``security`` (TLS, SASL) secures every connection: the loader's own client (offsets, the group's commit)
    and, as ``kafka.``-prefixed options, the Spark source's."""
    from pyspark.sql import functions as F

    from rill.client import KafkaClient

    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    topics = list(dict.fromkeys(topics))  # a set: a topic named twice is loaded once
    with _exclusive(out):
        shutil.rmtree(out / STAGING_DIR, ignore_errors=True)
        previous = published_manifests(out)
        positions = loaded_positions(out)
        with KafkaClient(bootstrap_servers, client_id="rill-loader", security=security) as client:
            tps = [tp for t in topics for tp in client.partitions_for(t)]
            earliest = client.earliest_offsets(tps)
            latest = client.latest_offsets(tps)
            starts: dict[TopicPartition, int] = {}
            for tp in tps:
                start = positions.get(tp, earliest[tp])
                if start < earliest[tp]:
                    say(f"WARNING {tp}: offsets {start}..{earliest[tp] - 1} were deleted before they were loaded")
                    start = earliest[tp]
                elif start > latest[tp]:
                    say(
                        f"WARNING {tp}: the log ends at {latest[tp]}, before the loaded position {start} (the topic "
                        f"was recreated or truncated): loading it from its earliest offset {earliest[tp]}"
                    )
                    start = earliest[tp]
                starts[tp] = start
            batch = (previous[-1].batch + 1) if previous else 1
            if all(starts[tp] >= latest[tp] for tp in tps):
                say("nothing new to load")
                if group_id:
                    client.commit_offsets(group_id, {tp: starts[tp] for tp in tps})
                return None
            staging = out / STAGING_DIR / batch_dir_name(batch)
            typed = _typed_topics(schema_registry, topics) if schema_registry else {}
            untyped = [t for t in topics if t not in typed]
            reads: list[tuple[list[str], dict[str, str]]] = [(untyped, {})] if untyped else []
            reads += [([t], options) for t, (options, _) in typed.items()]
            for read_topics, options in reads:
                df = (
                    spark.read.format("rill")
                    .option("kafka.bootstrap.servers", bootstrap_servers)
                    .option(
                        "assign",
                        json.dumps({t: [tp.partition for tp in tps if tp.topic == t] for t in read_topics}),
                    )
                    .option(
                        "startingOffsets",
                        json.dumps(offsets_to_json({tp: starts[tp] for tp in tps if tp.topic in read_topics})),
                    )
                    .option(
                        "endingOffsets",
                        json.dumps(offsets_to_json({tp: latest[tp] for tp in tps if tp.topic in read_topics})),
                    )
                    .option("includeHeaders", "true")
                    .options(**security_options(security))
                    .options(**options)
                    .load()
                )
                with _standard_timestamps(spark):
                    (
                        df.withColumn("date", utc_date(F.col("timestamp")))
                        .write.mode("append")
                        .partitionBy("topic", "date")
                        .parquet(str(staging))
                    )
            counts: dict[TopicPartition, int] = {}
            if staging.exists():
                staged = (
                    spark.read.schema(STAGED_SCHEMA).parquet(str(staging)).groupBy("topic", "partition").count()
                ).collect()
                counts = {TopicPartition(str(r["topic"]), int(r["partition"])): int(r["count"]) for r in staged}
            ranges = tuple(LoadedRange(tp.topic, tp.partition, starts[tp], latest[tp], counts.get(tp, 0)) for tp in tps)
            schemas = {t: used for t, (_, used) in typed.items()}
            manifest = Manifest(batch, int(time.time() * 1000), ranges, schemas)
            staging.mkdir(parents=True, exist_ok=True)
            if before_publish is not None:
                before_publish(staging)
            publish(staging, out, manifest)
            for r in ranges:
                say(f"{r.topic}-{r.partition}: loaded offsets {r.start}..{r.end} ({r.records} records)")
            say(f"published {batch_dir_name(batch)} ({sum(r.records for r in ranges)} records)")
            if group_id:
                client.commit_offsets(group_id, {tp: latest[tp] for tp in tps})
            return manifest


def _typed_topics(registry_url: str, topics: list[str]) -> dict[str, tuple[dict[str, str], dict[str, dict[str, Any]]]]:
    """The topics with a ``<topic>-value`` or ``<topic>-key`` subject: the source options that read them typed,
    pinned to the subjects' latest versions now (the registry admits only compatible versions, so each
    record, whatever version wrote it, resolves to this one), and those versions for the manifest."""
    from rill.spark.typed import RegistryClient

    registry = RegistryClient(registry_url)
    subjects = set(registry.subjects())
    out: dict[str, tuple[dict[str, str], dict[str, dict[str, Any]]]] = {}
    for topic in topics:
        options: dict[str, str] = {}
        used: dict[str, dict[str, Any]] = {}
        for side in ("key", "value"):
            subject = f"{topic}-{side}"
            if subject not in subjects:
                continue
            fmt = registry.format_of(subject)
            latest = registry.version(subject, None, fmt)
            options[f"{side}Format"] = fmt
            options[f"{side}SchemaVersion"] = str(latest.version)
            used[side] = {"subject": subject, "version": latest.version, "id": latest.schema_id}
        if options:
            options["schemaRegistryUrl"] = registry_url
            out[topic] = (options, used)
    return out


def read_published(output: str | Path, columns: list[str] | None = None) -> Any:
    """The published data as one ``pyarrow.Table`` (what a non-Spark reader sees), with the partition
    columns ``batch``, ``topic`` and ``date`` as strings."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    out = Path(output)
    if not any(_BATCH_RE.match(p.name) for p in out.iterdir()):
        return None
    strings = pa.schema([(name, pa.string()) for name in PARTITION_COLUMNS])
    partitioning = ds.HivePartitioning.discover(schema=strings)
    dataset = ds.dataset(str(out), format="parquet", partitioning=partitioning)
    if "timestamp" in dataset.schema.names:
        # Batches written before the loader wrote standard timestamps hold INT96 (naive nanoseconds, UTC
        # values): read every batch as UTC instants.
        schema = dataset.schema.set(
            dataset.schema.get_field_index("timestamp"), pa.field("timestamp", pa.timestamp("us", tz="UTC"))
        )
        dataset = ds.dataset(str(out), format="parquet", partitioning=partitioning, schema=schema)
    return dataset.to_table(columns=columns)
