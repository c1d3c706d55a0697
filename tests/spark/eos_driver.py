"""A Structured Streaming driver run as its own process by the exactly-once tests (so it can be SIGKILLed):
copies a topic into another with the rill sink's ``exactlyOnce`` mode.

    python eos_driver.py BOOTSTRAP SOURCE TARGET CHECKPOINT MODE MAX_OFFSETS_PER_TRIGGER

MODE ``continuous`` runs micro-batches every 100 ms until killed; ``available-now`` copies what is there and
exits.
"""

from __future__ import annotations

import sys

from rill.spark.session import build_session


def main() -> None:
    bootstrap, source, target, checkpoint, mode, max_per_trigger = sys.argv[1:7]
    spark = build_session("local[2]", "rill-eos-test")
    spark.sparkContext.setLogLevel("ERROR")
    writer = (
        spark.readStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_per_trigger)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("rill")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", checkpoint)
    )
    if mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="100 milliseconds")
    query = writer.start()
    print("started", flush=True)
    if mode == "available-now":
        query.awaitTermination()
        print("done", flush=True)
        return
    while True:
        query.awaitTermination(0.5)
        progress = query.lastProgress
        if progress is not None:
            print(f"batch {progress['batchId']} rows {progress['numInputRows']}", flush=True)


if __name__ == "__main__":
    main()
