"""``rill consume TOPIC``: print records from a topic (Kafka's ``kafka-console-consumer``, kcat's ``-C``).

    rill consume orders --from-beginning --exit-at-end
    rill consume orders --offset 42 --partition 0 --count 10
    rill consume orders --timestamp 1700000000000 --format '%p:%o %k=%s\\n'
    rill consume orders --group billing                      # joins the group, commits offsets

Without ``--group`` the command assigns itself the partitions (all, or ``--partition``) and commits nothing.
Start: ``--offset latest`` (default), ``earliest`` (same as ``--from-beginning``), ``N`` (absolute) or ``-N``
(the last N records of each partition), or ``--timestamp MS`` (first record at or after it). With ``--group``
committed offsets win and the start only applies where the group has none, as in Kafka.

``--format`` takes kcat's tokens: ``%s`` value, ``%k`` key, ``%t`` topic, ``%p`` partition, ``%o`` offset,
``%T`` timestamp (ms), ``%h`` headers (``k=v,k=v``), ``%S``/``%K`` value/key length, ``%%``; escapes
``\\n`` ``\\t`` ``\\r`` ``\\\\``. The default prints the value and a newline. ``--json`` prints one JSON
object a line: ``topic``, ``partition``, ``offset``, ``timestamp``, ``key``, ``value`` (text, or null) and
``headers`` (name to text). Bytes that are not UTF-8 (Avro, say) are not mangled: such a key or value is given
as ``key_base64`` / ``value_base64`` instead, and such header values under ``headers_base64``.

Ctrl-C (SIGINT) or SIGTERM stops the command within a poll interval: it closes the consumer (a group member
commits its position and leaves the group, so the group is rebalanced or Empty at once), prints the total and
exits 130 or 143, as ``kafka-console-consumer`` does. The close waits at most ``--timeout`` seconds (for a
broker that has gone away); a second signal exits at once.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from rill.cli._common import (
    EXIT_USAGE,
    CliError,
    StopSignals,
    add_connection_options,
    client_config,
    describe_kafka_exception,
    ensure_reachable,
    new_parser,
    run_main,
)

Renderer = Callable[[Any], bytes]

BATCH = 5000  # records taken from the client per call
POLL_S = 0.2  # longest wait inside the client: how late a stop request is seen

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "0": b"\0"}
_TOKENS = "sktpoThSK%"


def compile_format(fmt: str) -> Renderer:
    """Turn a kcat-style format string into a function from a message to output bytes."""
    parts: list[bytes | str] = []
    literal = bytearray()
    i = 0
    while i < len(fmt):
        ch = fmt[i]
        if ch == "\\" and i + 1 < len(fmt) and fmt[i + 1] in _ESCAPES:
            literal += _ESCAPES[fmt[i + 1]]
            i += 2
        elif ch == "%":
            if i + 1 >= len(fmt) or fmt[i + 1] not in _TOKENS:
                bad = fmt[i : i + 2]
                raise CliError(f"invalid --format token '{bad}' (known: %s %k %t %p %o %T %h %S %K %%)", EXIT_USAGE)
            token = fmt[i + 1]
            if token == "%":
                literal += b"%"
            else:
                if literal:
                    parts.append(bytes(literal))
                    literal.clear()
                parts.append(token)
            i += 2
        else:
            literal += ch.encode()
            i += 1
    if literal:
        parts.append(bytes(literal))

    if parts == ["s", b"\n"]:  # the default: skip the general path
        return lambda msg: (msg.value() or b"") + b"\n"
    getters: list[Callable[[Any], bytes]] = [_getter(p) for p in parts]

    def render(msg: Any) -> bytes:
        return b"".join([g(msg) for g in getters])

    return render


def _getter(part: bytes | str) -> Callable[[Any], bytes]:
    if isinstance(part, bytes):
        return lambda _m: part
    table: dict[str, Callable[[Any], bytes]] = {
        "s": lambda m: m.value() or b"",
        "k": lambda m: m.key() or b"",
        "t": lambda m: m.topic().encode(),
        "p": lambda m: str(m.partition()).encode(),
        "o": lambda m: str(m.offset()).encode(),
        "T": lambda m: str(_timestamp(m)).encode(),
        "h": lambda m: _headers_text(m).encode(),
        "S": lambda m: str(len(m.value() or b"")).encode(),
        "K": lambda m: str(len(m.key() or b"")).encode(),
    }
    return table[part]


def _timestamp(msg: Any) -> int:
    ts_type, ts = msg.timestamp()
    return int(ts) if ts_type != 0 else -1


def _headers_text(msg: Any) -> str:
    headers = msg.headers() or []
    return ",".join(k if v is None else f"{k}={v.decode('utf-8', 'replace')}" for k, v in headers)


def _put(text: dict[str, Any], binary: dict[str, str], name: str, data: bytes | None) -> None:
    """``text[name]`` is ``data`` as UTF-8 text (None for null); bytes that are not UTF-8 go, in base64,
    to ``binary[name]`` instead."""
    if data is None:
        text[name] = None
        return
    try:
        text[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        binary[name] = base64.b64encode(data).decode("ascii")


def render_json(msg: Any) -> bytes:
    record: dict[str, Any] = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": _timestamp(msg),
    }
    binary: dict[str, str] = {}
    _put(record, binary, "key", msg.key())
    _put(record, binary, "value", msg.value())
    record.update({f"{name}_base64": data for name, data in binary.items()})
    headers: dict[str, Any] = {}
    binary_headers: dict[str, str] = {}
    for name, data in msg.headers() or []:
        _put(headers, binary_headers, name, data)
    record["headers"] = headers
    if binary_headers:
        record["headers_base64"] = binary_headers
    return json.dumps(record).encode() + b"\n"


def parse_offset(text: str) -> int | str:
    if text in ("earliest", "beginning"):
        return "earliest"
    if text in ("latest", "end"):
        return "latest"
    try:
        return int(text)
    except ValueError:
        raise CliError(f"invalid --offset '{text}': expected earliest, latest or a number", EXIT_USAGE) from None


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill consume", "Print records from a topic.")
    parser.add_argument("topic", metavar="TOPIC", help="topic to read")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", metavar="OFFSET", help="earliest, latest (default), N, or -N (last N records)")
    start.add_argument("--timestamp", type=int, metavar="MS", help="start at the first record at or after MS")
    parser.add_argument("--group", metavar="GROUP", help="consume as a member of this consumer group")
    parser.add_argument("--partition", type=int, action="append", metavar="N", help="only this partition (repeatable)")
    parser.add_argument("--format", metavar="FMT", help="kcat-style output format (default '%%s\\n')")
    parser.add_argument("--count", "--max-messages", dest="count", type=int, metavar="N", help="stop after N records")
    parser.add_argument("--exit-at-end", action="store_true", help="stop when every partition is read to its end")
    parser.add_argument("--timeout-ms", type=int, metavar="MS", help="stop when no record arrives for MS milliseconds")
    parser.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_uncommitted",
        help="whether to skip records of open or aborted transactions (default read_uncommitted)",
    )
    parser.add_argument(
        "--consumer-property",
        action="append",
        metavar="K=V",
        help="extra librdkafka consumer config (repeatable)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print the total on stderr")
    add_connection_options(parser)
    return parser


class _Session:
    """The consume loop's state: which partitions are assigned and which have reached their end."""

    def __init__(self, consumer: Any, args: argparse.Namespace, start: int | str | None, stop: StopSignals) -> None:
        self.consumer = consumer
        self.stop = stop
        self.args = args
        self.start = start
        self.assigned: set[tuple[str, int]] = set()
        self.at_end: set[tuple[str, int]] = set()
        self.count = 0  # records written out (kept here, so that an interrupted loop still has it)

    def on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        if isinstance(self.start, int) or self.args.timestamp is not None:
            partitions = resolve_start(consumer, partitions, self.start, self.args.timestamp, self.args.timeout)
            consumer.assign(partitions)
        self.assigned |= {(p.topic, p.partition) for p in partitions}

    def on_revoke(self, _consumer: Any, partitions: list[Any]) -> None:
        gone = {(p.topic, p.partition) for p in partitions}
        self.assigned -= gone
        self.at_end -= gone

    def all_at_end(self) -> bool:
        return bool(self.assigned) and self.assigned <= self.at_end


def resolve_start(
    consumer: Any, partitions: list[Any], start: int | str | None, timestamp: int | None, timeout_s: float
) -> list[Any]:
    """Set each partition's start offset from the options (timestamps looked up with ListOffsets)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    if timestamp is not None:
        query = [TopicPartition(p.topic, p.partition, timestamp) for p in partitions]
        try:
            found = consumer.offsets_for_times(query, timeout=timeout_s)
        except Exception as e:
            raise CliError(f"cannot look up offsets for timestamp {timestamp}: {describe_kafka_exception(e)}") from None
        return [TopicPartition(p.topic, p.partition, p.offset if p.offset >= 0 else OFFSET_END) for p in found]
    if start == "earliest":
        offset = OFFSET_BEGINNING
    elif start == "latest" or start is None:
        offset = OFFSET_END
    elif isinstance(start, int) and start < 0:
        offset = -2000 + start  # librdkafka's logical "tail" offset: the last -start records
    else:
        offset = int(start)
    return [TopicPartition(p.topic, p.partition, offset) for p in partitions]


def _topic_partitions(consumer: Any, topic: str, wanted: list[int] | None, timeout_s: float) -> list[int]:
    try:
        md = consumer.list_topics(topic=topic, timeout=timeout_s)
    except Exception as e:
        raise CliError(f"cannot read metadata for topic '{topic}': {describe_kafka_exception(e)}") from None
    tm = md.topics.get(topic)
    if tm is None or (tm.error is not None and tm.error.name() == "UNKNOWN_TOPIC_OR_PART") or not tm.partitions:
        raise CliError(f"unknown topic '{topic}' (UNKNOWN_TOPIC_OR_PARTITION)")
    if tm.error is not None and tm.error.name() != "LEADER_NOT_AVAILABLE":
        raise CliError(f"topic '{topic}': {tm.error.name()}: {tm.error.str()}")
    ids = sorted(tm.partitions)
    if wanted:
        missing = [p for p in wanted if p not in tm.partitions]
        if missing:
            raise CliError(f"topic '{topic}' has no partition {missing[0]} (it has {len(ids)})")
        return sorted(set(wanted))
    return ids


def _consume_loop(session: _Session, render: Renderer, out: IO[bytes]) -> None:
    args = session.args
    consumer = session.consumer
    limit = args.count
    idle_limit = None if args.timeout_ms is None else args.timeout_ms / 1000.0
    last_activity = time.monotonic()
    at_end = session.at_end
    while not session.stop.requested:
        wanted = BATCH if limit is None else max(1, min(BATCH, limit - session.count))
        batch = consumer.consume(num_messages=wanted, timeout=POLL_S)
        chunks = []
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.name() == "_PARTITION_EOF":
                    session.at_end.add((msg.topic(), msg.partition()))
                    continue
                transient = err.retriable() or err.name().startswith("_")
                if transient and not err.fatal():
                    continue  # librdkafka reconnects and retries on its own
                raise CliError(f"{err.name()}: {err.str()}")
            if at_end:
                at_end.discard((msg.topic(), msg.partition()))
            chunks.append(render(msg))
        if chunks:
            # Counted before they are written: an interrupt right after the write must not lose them.
            session.count += len(chunks)
            out.write(b"".join(chunks))
            out.flush()
            if limit is not None and session.count >= limit:
                return
        if batch:
            last_activity = time.monotonic()
        if args.exit_at_end and session.all_at_end():
            return
        if idle_limit is not None and time.monotonic() - last_activity >= idle_limit:
            return


def _body(argv: list[str]) -> int:
    args = _build_parser().parse_args(argv)
    if args.group and args.partition:
        raise CliError("--partition cannot be combined with --group (the group assigns partitions)", EXIT_USAGE)
    if args.count is not None and args.count < 0:
        raise CliError(f"invalid --count {args.count}", EXIT_USAGE)
    if args.json and args.format:
        raise CliError("--json and --format cannot be combined", EXIT_USAGE)
    render: Renderer = render_json if args.json else compile_format(args.format or "%s\\n")
    start: int | str | None = "earliest" if args.from_beginning else None
    if args.offset is not None:
        start = parse_offset(args.offset)
    extra = dict(_parse_props(args.consumer_property))
    ensure_reachable(args.bootstrap_server, args.timeout)

    earliest = start == "earliest"
    conf = client_config(
        args,
        {
            "group.id": args.group or "rill-console-consumer",
            "enable.auto.commit": bool(args.group),
            "enable.auto.offset.store": bool(args.group),
            "auto.offset.reset": "earliest" if earliest else "latest",
            "enable.partition.eof": True,
            "isolation.level": args.isolation_level,
            # librdkafka stops fetching for this long whenever its 64 MiB prefetch queue is full (1 s by
            # default, though the queue drains in a fraction of that): a reader slower than the broker pauses.
            "fetch.queue.backoff.ms": 10,
            **extra,
        },
    )
    stop = StopSignals()
    stop.install()
    try:
        return _run(args, conf, render, start, stop)
    finally:
        stop.restore()


def _run(
    args: argparse.Namespace, conf: dict[str, Any], render: Renderer, start: int | str | None, stop: StopSignals
) -> int:
    from confluent_kafka import Consumer, TopicPartition

    try:
        consumer = Consumer(conf)
    except Exception as e:
        raise CliError(f"invalid consumer config: {describe_kafka_exception(e)}") from None
    session = _Session(consumer, args, start, stop)
    try:
        partitions = _topic_partitions(consumer, args.topic, args.partition, args.timeout)
        if args.group:
            consumer.subscribe([args.topic], on_assign=session.on_assign, on_revoke=session.on_revoke)
        else:
            tps = [TopicPartition(args.topic, p) for p in partitions]
            tps = resolve_start(consumer, tps, start, args.timestamp, args.timeout)
            consumer.assign(tps)
            session.assigned = {(args.topic, p) for p in partitions}
        if args.count != 0:
            _consume_loop(session, render, sys.stdout.buffer)
    finally:
        sys.stdout.flush()
        _close(consumer, session, max(1.0, args.timeout))
    # As kafka-console-consumer: the total so far, then the signal's exit code.
    _report_total(session)
    return stop.exit_code


def _report_total(session: _Session) -> None:
    if not session.args.quiet:
        sys.stderr.write(f"Processed a total of {session.count} messages\n")
        sys.stderr.flush()


def _close(consumer: Any, session: _Session, timeout_s: float) -> None:
    """Close the consumer (commit, LeaveGroup), bounded: if the broker does not answer within ``timeout_s``
    the process still ends, with the total and the exit code it would have had."""

    def give_up() -> None:
        if session.stop.requested:
            _report_total(session)
        sys.stderr.write(f"error: the consumer did not close within {timeout_s:g} s\n")
        sys.stderr.flush()
        os._exit(session.stop.exit_code or 1)

    watchdog = threading.Timer(timeout_s, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        consumer.close()
    finally:
        watchdog.cancel()


def _parse_props(items: list[str] | None) -> list[tuple[str, str]]:
    from rill.cli._common import parse_key_value

    return [parse_key_value(p, "consumer property") for p in items or ()]


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
