"""A derived feed: a Structured Streaming job that turns an events topic into per-minute counts.

Reads ``source`` with the ``rill`` stream source, counts events per key and minute of their timestamp
(with a watermark so late windows are finalised), and writes each finished window as one JSON record
``{"window_start": "...", "key": "...", "count": N}`` into ``target`` with the ``rill`` stream sink.
``window_start`` is the window's start in UTC (``2026-11-22T10:03:00Z``), whatever the session time zone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rill.spark.option_names import security_options
from rill.spark.utc import utc_iso_seconds

if TYPE_CHECKING:
    from rill.client.security import ClientSecurity


def per_minute_counts(
    spark: Any,
    bootstrap_servers: str,
    source: str,
    target: str,
    checkpoint: str,
    *,
    watermark: str = "1 minute",
    starting_offsets: str = "earliest",
    available_now: bool = False,
    security: ClientSecurity | None = None,
) -> Any:
    """Start the feed; returns the ``StreamingQuery``. ``security`` (TLS, SASL) goes to the source and the
    sink as ``kafka.``-prefixed options."""
    from pyspark.sql import functions as F

    secured = security_options(security)

    events = (
        spark.readStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", source)
        .option("startingOffsets", starting_offsets)
        .options(**secured)
        .load()
    )
    counts = (
        events.withWatermark("timestamp", watermark)
        .groupBy(F.window("timestamp", "1 minute").alias("w"), F.col("key"))
        .count()
    )
    out = counts.select(
        F.col("key"),
        F.to_json(
            F.struct(
                utc_iso_seconds(F.col("w.start")).alias("window_start"),
                F.col("key").cast("string").alias("key"),
                F.col("count"),
            )
        ).alias("value"),
    )
    writer = (
        out.writeStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("topic", target)
        .options(**secured)
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()
