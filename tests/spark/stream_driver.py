"""A Structured Streaming driver run as its own process by the streaming tests (so it can be SIGKILLed):
reads a topic with the rill source and writes Parquet with Spark's file sink.

    python stream_driver.py BOOTSTRAP TOPIC OUTPUT CHECKPOINT MODE [MAX_OFFSETS_PER_TRIGGER]

MODE ``continuous`` runs micro-batches every 200 ms until killed; ``available-now`` processes what is there
and exits.
"""

from __future__ import annotations

import sys

from rill.spark.session import build_session


def main() -> None:
    bootstrap, topic, output, checkpoint, mode = sys.argv[1:6]
    max_per_trigger = sys.argv[6] if len(sys.argv) > 6 else ""
    spark = build_session("local[2]", "rill-stream-test")
    spark.sparkContext.setLogLevel("ERROR")
    reader = (
        spark.readStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_per_trigger)
    writer = (
        reader.load()
        .select("partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
    )
    if mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    query = writer.start()
    print("started", flush=True)
    if mode == "available-now":
        query.awaitTermination()
        print("done", flush=True)
    else:
        while True:
            query.awaitTermination(1)
            progress = query.lastProgress
            if progress is not None:
                print(f"batch {progress['batchId']} rows {progress['numInputRows']}", flush=True)


if __name__ == "__main__":
    main()
