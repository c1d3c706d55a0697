"""``rill produce TOPIC``: send lines from stdin or a file as records (Kafka's ``kafka-console-producer``).

    rill produce orders < lines.txt
    rill produce orders --file lines.txt --parse-key              # key<TAB>value lines
    rill produce orders --key-separator ':' --header source=cli --compression zstd --acks all

Each input line (without its ``\\n`` / ``\\r\\n``) is one record. With ``--parse-key`` or ``--key-separator``
a line is split at the first separator into key and value; a line without the separator is an error (the
records read before it are still delivered). On a terminal a progress line with the rate is drawn on stderr
for large inputs.
The command exits non-zero if any record was not acknowledged. When the broker stops answering while
records are being sent, one warning line says so at once (as Kafka's console producer logs its WARN
lines), and the records wait for it until ``message.timeout.ms``.

Ctrl-C (SIGINT) or SIGTERM stops reading the input; the records already handed to the producer are still
delivered (as Kafka's console producer closes its producer on the way out), the total is printed and the
command exits with 128 + the signal's number. A signal while the command starts (before it reads) ends it the
same way, with none sent. A second signal exits at once.
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from rill.cli._common import (
    EXIT_USAGE,
    CliError,
    StopSignals,
    add_connection_options,
    client_config,
    describe_kafka_exception,
    ensure_reachable,
    human_bytes,
    new_parser,
    parse_key_value,
    run_main,
)

COMPRESSION_TYPES = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS_CHOICES = ("all", "-1", "0", "1")
PROGRESS_MIN_BYTES = 4 * 1024 * 1024
PROGRESS_INTERVAL_S = 0.25


@dataclass(slots=True)
class DeliveryTally:
    """Counts delivery reports; keeps the first error to report it."""

    delivered: int = 0
    failed: int = 0
    first_error: str | None = None
    partitions: set[int] = field(default_factory=set)

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = f"{err.name()}: {err.str()}"
        else:
            self.delivered += 1


class BrokerWatch:
    """librdkafka's ``error_cb``: the first time no broker is reachable any more it is said on stderr at
    once, instead of the command staying silent until its records time out."""

    def __init__(self, stream: IO[str], bootstrap: str) -> None:
        self._stream = stream
        self._bootstrap = bootstrap
        self.timeout_s = 0.0  # message.timeout.ms, in seconds
        self.warned = False

    def on_error(self, err: Any) -> None:
        if self.warned or err.name() != "_ALL_BROKERS_DOWN":
            return
        self.warned = True
        self._stream.write(
            f"warning: lost the connection to the broker at {self._bootstrap} ({err.str()}); "
            f"records not yet acknowledged wait for it for up to {self.timeout_s:g} s\n"
        )
        self._stream.flush()


READ_CHUNK = 1 << 16


class LineReader:
    """Reads the input in a thread of its own, a chunk of whatever is available at a time (so a line typed on a
    terminal goes out at once), and hands the main thread lists of lines; the main thread waits for them with
    a timeout, so it sees a stop request even while the input is silent."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._chunks: queue.Queue[list[bytes] | BaseException | None] = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._run, name="rill-produce-read", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        read = getattr(self._stream, "read1", self._stream.read)
        tail = b""
        try:
            while chunk := read(READ_CHUNK):
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()
                if lines:
                    self._chunks.put([line[:-1] if line.endswith(b"\r") else line for line in lines])
            if tail:  # a final unterminated line counts, an empty tail does not
                self._chunks.put([tail[:-1] if tail.endswith(b"\r") else tail])
            self._chunks.put(None)
        except BaseException as e:  # handed to the main thread, which raises it
            self._chunks.put(e)

    def next_lines(self, timeout_s: float) -> list[bytes] | None:
        """The next lines; [] when none came within the timeout; None at the end of the input."""
        try:
            item = self._chunks.get(timeout=timeout_s)
        except queue.Empty:
            return []
        if isinstance(item, BaseException):
            raise item
        return item


class Poller:
    """Serves the producer's callbacks (delivery reports, errors). librdkafka reports only from inside
    ``poll``, which the main thread calls between records; while it waits for input (which can stay silent
    for as long as the writer likes) a thread of ours polls instead, so a lost broker is reported at once.
    One lock keeps the callbacks to one thread at a time."""

    IDLE_S = 0.2

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rill-produce-poll", daemon=True)
        self._thread.start()

    def poll(self, timeout_s: float) -> None:
        with self._lock:
            self._producer.poll(timeout_s)
            self._last = time.monotonic()

    def _run(self) -> None:
        while not self._stopping.wait(self.IDLE_S):
            if time.monotonic() - self._last >= self.IDLE_S and self._lock.acquire(blocking=False):
                try:
                    self._producer.poll(0)
                finally:
                    self._lock.release()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()


class Progress:
    """A one-line progress display on a terminal: records, bytes, rate and (for files) percent done."""

    def __init__(self, stream: IO[str], total_bytes: int | None) -> None:
        self._stream = stream
        self._total = total_bytes
        self._start = time.monotonic()
        self._last = 0.0
        self.drawn = False

    def maybe_draw(self, records: int, nbytes: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < PROGRESS_INTERVAL_S:
            return
        if self._total is None and not self.drawn and nbytes < PROGRESS_MIN_BYTES and now - self._start < 1.0:
            return  # input of unknown size: only once it proves large or slow
        self._last = now
        self.drawn = True
        elapsed = max(now - self._start, 1e-6)
        line = f"{records:>12,} records  {human_bytes(nbytes):>9}  {records / elapsed:>11,.0f} rec/s"
        line += f"  {human_bytes(nbytes / elapsed)}/s"
        if self._total:
            frac = min(1.0, nbytes / self._total)
            filled = int(frac * 24)
            bar = "=" * filled + (">" if filled < 24 else "") + " " * max(0, 23 - filled)
            line += f"  [{bar}] {frac * 100:5.1f}%"
        self._stream.write("\r" + line)
        self._stream.flush()

    def finish(self, records: int, nbytes: int) -> None:
        if not self.drawn:
            return
        self.maybe_draw(records, nbytes, force=True)
        self._stream.write("\n")
        self._stream.flush()


def parse_headers(items: list[str] | None) -> list[tuple[str, bytes]]:
    headers: list[tuple[str, bytes]] = []
    for item in items or ():
        key, value = parse_key_value(item, "header")
        headers.append((key, value.encode()))
    return headers


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill produce", "Send lines from stdin (or a file) to a topic, one record per line.")
    parser.add_argument("topic", metavar="TOPIC", help="topic to write to")
    parser.add_argument("--file", metavar="PATH", help="read lines from this file instead of stdin")
    parser.add_argument("--parse-key", action="store_true", help="split each line into key and value (tab)")
    parser.add_argument(
        "--key-separator",
        metavar="SEP",
        help="separator between key and value (implies --parse-key; default tab)",
    )
    parser.add_argument("--header", action="append", metavar="K=V", help="header added to every record (repeatable)")
    parser.add_argument("--partition", type=int, metavar="N", help="send every record to this partition")
    parser.add_argument(
        "--compression",
        "--compression-codec",
        dest="compression",
        choices=COMPRESSION_TYPES,
        default="none",
        help="batch compression (default none)",
    )
    parser.add_argument(
        "--acks",
        "--request-required-acks",
        dest="acks",
        choices=ACKS_CHOICES,
        default="all",
        help="acknowledgements to wait for (default all)",
    )
    parser.add_argument("--linger-ms", type=int, default=5, metavar="MS", help="batching delay (default 5)")
    parser.add_argument(
        "--producer-property",
        action="append",
        metavar="K=V",
        help="extra librdkafka producer config (repeatable)",
    )
    parser.add_argument("--no-progress", action="store_true", help="never draw the progress line")
    add_connection_options(parser, json_output=False)
    return parser


def _check_topic(producer: Any, topic: str, partition: int | None, timeout_s: float) -> None:
    try:
        md = producer.list_topics(topic=topic, timeout=timeout_s)
    except Exception as e:
        raise CliError(f"cannot read metadata for topic '{topic}': {describe_kafka_exception(e)}") from None
    tm = md.topics.get(topic)
    if tm is None or (tm.error is not None and tm.error.name() == "UNKNOWN_TOPIC_OR_PART"):
        raise CliError(f"unknown topic '{topic}' (UNKNOWN_TOPIC_OR_PARTITION)")
    if tm.error is not None and tm.error.name() not in ("LEADER_NOT_AVAILABLE",):
        raise CliError(f"topic '{topic}': {tm.error.name()}: {tm.error.str()}")
    if partition is not None and tm.partitions and partition not in tm.partitions:
        raise CliError(f"topic '{topic}' has no partition {partition} (it has {len(tm.partitions)})")


def _open_input(args: argparse.Namespace) -> tuple[IO[bytes], int | None]:
    if args.file is None or args.file == "-":
        stdin = sys.stdin.buffer
        try:
            st = os.fstat(stdin.fileno())
            size = st.st_size if st.st_size > 0 and not os.isatty(stdin.fileno()) else None
        except (OSError, ValueError):
            size = None
        return stdin, size
    try:
        f = open(args.file, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as e:
        raise CliError(f"cannot read {args.file}: {e.strerror or e}") from None
    return f, os.fstat(f.fileno()).st_size


def _produce_all(
    args: argparse.Namespace,
    producer: Any,
    poller: Poller,
    stream: IO[bytes],
    progress: Progress | None,
    stop: StopSignals,
) -> int:
    separator: bytes | None = None
    if args.key_separator is not None:
        separator = args.key_separator.encode().decode("unicode_escape").encode()
        if not separator:
            raise CliError("--key-separator must not be empty", EXIT_USAGE)
    elif args.parse_key:
        separator = b"\t"
    headers = parse_headers(args.header) or None
    extra: dict[str, Any] = {}
    if args.partition is not None:
        extra["partition"] = args.partition
    topic = args.topic
    produce = producer.produce
    count = 0
    nbytes = 0
    for count, line in enumerate(_lines(stream, stop), 1):
        key: bytes | None = None
        value = line
        if separator is not None:
            key, sep, value = line.partition(separator)
            if not sep:
                raise CliError(f"no key separator found on line {count}")
        nbytes += len(line) + 1
        while True:
            try:
                produce(topic, value, key, headers=headers, **extra)
                break
            except BufferError:
                poller.poll(0.05)
        if count & 1023 == 0:
            poller.poll(0)
            if progress is not None:
                progress.maybe_draw(count, nbytes)
    if progress is not None:
        progress.finish(count, nbytes)
    return count


def _lines(stream: IO[bytes], stop: StopSignals) -> Iterator[bytes]:
    """The input's lines without their terminator, until its end or a stop signal."""
    reader = LineReader(stream)
    while stop.signum is None:
        lines = reader.next_lines(Poller.IDLE_S)
        if lines is None:
            return
        for line in lines:
            if stop.signum is not None:
                return
            yield line


def _body(argv: list[str]) -> int:
    args = _build_parser().parse_args(argv)
    if args.partition is not None and args.partition < 0:
        raise CliError(f"invalid --partition {args.partition}", EXIT_USAGE)
    extra_props = dict(parse_key_value(p, "producer property") for p in args.producer_property or ())
    stop = StopSignals()  # from the start: a signal while starting ends the command as one while it reads
    stop.install()
    try:
        return _produce(args, extra_props, stop)
    finally:
        stop.restore()


def _produce(args: argparse.Namespace, extra_props: dict[str, str], stop: StopSignals) -> int:
    stream, size = _open_input(args)
    remaining = sent = 0
    try:
        ensure_reachable(args.bootstrap_server, args.timeout, stop)
        from confluent_kafka import Producer

        tally = DeliveryTally()
        watch = BrokerWatch(sys.stderr, args.bootstrap_server)
        conf = client_config(
            args,
            {
                "acks": args.acks,
                "compression.type": args.compression,
                "linger.ms": args.linger_ms,
                "enable.idempotence": False,
                "queue.buffering.max.messages": 500_000,
                "message.timeout.ms": max(5000, int(args.timeout * 1000) * 4),
                "on_delivery": tally.on_delivery,
                "error_cb": watch.on_error,
                **extra_props,
            },
        )
        watch.timeout_s = float(conf["message.timeout.ms"]) / 1000  # a --producer-property may set it
        try:
            producer = Producer(conf)
        except Exception as e:
            raise CliError(f"invalid producer config: {describe_kafka_exception(e)}") from None
        try:
            if not stop.requested:
                _check_topic(producer, args.topic, args.partition, args.timeout)
        except CliError:
            if not stop.requested:  # a signal meanwhile ends the command as a signal does
                raise
        show_progress = not args.no_progress and sys.stderr.isatty() and (size is None or size >= PROGRESS_MIN_BYTES)
        progress = Progress(sys.stderr, size) if show_progress else None
        started = time.monotonic()
        error: CliError | None = None
        if not stop.requested:
            poller = Poller(producer)
            try:
                sent = _produce_all(args, producer, poller, stream, progress, stop)
            except CliError as e:
                error = e
                sent = tally.delivered
            finally:
                poller.stop()
            remaining = producer.flush(max(args.timeout * 4, 10.0))
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    if stop.signum is not None:
        # As kafka-console-producer: what was read before the signal is delivered, then the signal's exit code.
        sys.stderr.write(f"Interrupted: {tally.delivered:,} records sent to {args.topic}")
        sys.stderr.write(f", {remaining:,} not acknowledged in time\n" if remaining else "\n")
        return 128 + stop.signum
    if remaining:
        raise CliError(f"{remaining} record(s) not acknowledged in time by {args.bootstrap_server}")
    if error is not None:
        raise CliError(f"{error.message} ({tally.delivered} record(s) before it were sent)")
    if tally.failed:
        raise CliError(f"{tally.failed} of {sent} record(s) failed: {tally.first_error}")
    if (progress is not None and progress.drawn) or args.verbose:
        elapsed = time.monotonic() - started
        sys.stderr.write(f"Produced {sent:,} records to {args.topic} in {elapsed:.2f} s\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
