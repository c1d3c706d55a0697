"""Browsing and producing messages. A browse is bounded on the client: it assigns the partitions at the asked
position (oldest, newest, an offset or a time), reads at most ``MAX_SCANNED`` records in total, keeps the ones
the filters match (key, value text, header) up to ``limit``, and stops at each partition's end as it was when
the browse started, so a large topic costs what a page shows, never a full scan on the server.

Keys and values are shown as text, as JSON when they parse, or decoded through the schema registry when they
carry Confluent's framing (magic byte 0, a 4-byte schema id): Avro with the writer schema (fastavro), JSON
Schema as its JSON document; other framed payloads show their schema id and bytes."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from rill.console.cluster import ConsoleError
from rill.registry.avro_limits import has_free_items

MAX_SCANNED = 5000
MAX_LIMIT = 500
POLL_BUDGET_S = 10.0
MAX_SHOWN = 8192  # characters of a key or a value shown; a page of MAX_LIMIT records stays a few MB at most


@dataclass
class Message:
    partition: int
    offset: int
    timestamp: int
    key: str | None
    value: str | None
    headers: list[tuple[str, str]]
    key_kind: str
    value_kind: str

    @property
    def time(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.timestamp / 1000)) + f".{self.timestamp % 1000:03d}Z"


class Decoder:
    """Payload to text; schemas fetched from the registry once per id (kept for the life of the console)."""

    _schemas: dict[tuple[str, int], dict[str, Any]] = {}
    _lock = threading.Lock()

    def __init__(self, registry_url: str | None) -> None:
        self.registry_url = registry_url.rstrip("/") if registry_url else None

    def _schema(self, schema_id: int) -> dict[str, Any] | None:
        if self.registry_url is None:
            return None
        key = (self.registry_url, schema_id)
        with self._lock:
            found = self._schemas.get(key)
        if found is None:
            try:
                with urllib.request.urlopen(f"{self.registry_url}/schemas/ids/{schema_id}", timeout=5) as r:
                    found = json.loads(r.read())
            except (OSError, ValueError):
                return None
            with self._lock:
                self._schemas[key] = found
        return found

    def decode(self, data: bytes | None) -> tuple[str | None, str]:
        """The text shown (at most ``MAX_SHOWN`` characters, then how much more there is) and what it was
        decoded as (text, json, avro, json-schema, protobuf, binary)."""
        if data is None:
            return None, "null"
        text, kind = self._decode(data)
        if len(text) > MAX_SHOWN:
            text = text[:MAX_SHOWN] + f"\n… ({len(text) - MAX_SHOWN:,} more characters not shown)"
        return text, kind

    def _decode(self, data: bytes) -> tuple[str, str]:
        if len(data) >= 5 and data[0] == 0 and self.registry_url is not None:
            schema_id = int.from_bytes(data[1:5], "big")
            schema = self._schema(schema_id)
            if schema is not None:
                kind = schema.get("schemaType") or "AVRO"
                try:
                    if kind == "AVRO":
                        import fastavro

                        writer = json.loads(schema["schema"])
                        if has_free_items(writer):  # its records may claim any number of items for free
                            return _hex(data[5:]), f"avro #{schema_id} (not decoded: items that take no byte)"
                        parsed = fastavro.parse_schema(writer)
                        value = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
                        return json.dumps(value, default=str, indent=2, ensure_ascii=False), f"avro #{schema_id}"
                    if kind == "JSON":
                        document = json.loads(data[5:])
                        return json.dumps(document, indent=2, ensure_ascii=False), f"json-schema #{schema_id}"
                except (ValueError, EOFError, KeyError, TypeError, IndexError, RecursionError):
                    pass
                return _hex(data[5:]), f"{kind.lower()} #{schema_id}"
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _hex(data), "binary"
        try:
            parsed_json = json.loads(text)
            if isinstance(parsed_json, dict | list):
                return json.dumps(parsed_json, indent=2, ensure_ascii=False), "json"
        except (ValueError, RecursionError):  # not JSON, or nested deeper than a parser goes
            pass
        return text, "text"


def _hex(data: bytes) -> str:
    """Bytes as hex, only as many as are shown, then how many more there are."""
    shown = (MAX_SHOWN - 64) // 3  # and the note fits in MAX_SHOWN
    text = data[:shown].hex(" ")
    return text + f"\n… ({len(data) - shown:,} more bytes not shown)" if len(data) > shown else text


@dataclass(frozen=True)
class Browse:
    topic: str
    partition: int | None = None  # None: every partition
    start: str = "newest"  # oldest, newest, offset, timestamp
    position: int = 0
    limit: int = 50
    key: str = ""
    value: str = ""
    header: str = ""


def browse(config: dict[str, Any], request: Browse, partitions: list[tuple[int, int, int]],
           decoder: Decoder) -> tuple[list[Message], int]:  # fmt: skip
    """Messages matching ``request`` and how many records were read; ``partitions``: (partition, start offset,
    end offset) of the topic now."""
    limit = max(1, min(request.limit, MAX_LIMIT))
    chosen = [p for p in partitions if request.partition is None or p[0] == request.partition]
    if not chosen:
        raise ConsoleError(f"{request.topic} has no partition {request.partition}")
    assignments: list[TopicPartition] = []
    ends: dict[int, int] = {}
    for partition, start, end in chosen:
        if end <= start:
            continue
        ends[partition] = end
        if request.start == "oldest":
            offset = start
        elif request.start == "offset":
            offset = min(max(request.position, start), end)
        elif request.start == "timestamp":
            offset = request.position  # resolved by offsets_for_times below
        else:  # newest: the last ``limit`` of each partition
            offset = max(start, end - limit)
        assignments.append(TopicPartition(request.topic, partition, offset))
    if not assignments:
        return [], 0
    consumer = Consumer({**config, "group.id": "rill-console-browse", "enable.auto.commit": False,
                         "enable.partition.eof": True, "log_level": 3})  # fmt: skip
    try:
        if request.start == "timestamp":
            found = consumer.offsets_for_times(assignments, timeout=10)
            assignments = [TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else ends[tp.partition])
                           for tp in found]  # fmt: skip
        assignments = [tp for tp in assignments if tp.offset < ends[tp.partition]]
        if not assignments:
            return [], 0
        consumer.assign(assignments)
        return _read(consumer, request, ends, {tp.partition for tp in assignments}, limit, decoder)
    finally:
        consumer.close()


def _read(consumer: Consumer, request: Browse, ends: dict[int, int], open_partitions: set[int], limit: int,
          decoder: Decoder) -> tuple[list[Message], int]:  # fmt: skip
    out: list[Message] = []
    scanned = 0
    deadline = time.monotonic() + POLL_BUDGET_S
    while open_partitions and scanned < MAX_SCANNED and len(out) < limit and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error, partition, offset = msg.error(), msg.partition(), msg.offset()
        if error is not None or partition is None or offset is None:
            if error is not None and error.code() == KafkaError._PARTITION_EOF and partition is not None:
                open_partitions.discard(partition)
            continue
        if offset >= ends.get(partition, 0):
            open_partitions.discard(partition)
            continue
        scanned += 1
        if offset + 1 >= ends[partition]:
            open_partitions.discard(partition)
        key, key_kind = decoder.decode(msg.key())
        value, value_kind = decoder.decode(msg.value())
        raw_headers: Any = msg.headers() or []
        headers = [(str(k), v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v or ""))
                   for k, v in raw_headers]  # fmt: skip
        if request.key and request.key not in (key or ""):
            continue
        if request.value and request.value not in (value or ""):
            continue
        if request.header and not any(request.header in f"{k}={v}" for k, v in headers):
            continue
        out.append(Message(partition, offset, msg.timestamp()[1], key, value, headers, key_kind, value_kind))
    out.sort(key=lambda m: (m.timestamp, m.partition, m.offset), reverse=request.start == "newest")
    return out[:limit], scanned


def produce(config: dict[str, Any], topic: str, key: str | None, value: str | None,
            headers: list[tuple[str, str]], partition: int | None) -> tuple[int, int]:  # fmt: skip
    """Write one message; (partition, offset) once acknowledged."""
    producer = Producer({**config, "acks": "all", "log_level": 3})
    result: dict[str, Any] = {}

    def delivered(err: Any, msg: Any) -> None:
        result["err"], result["msg"] = err, msg

    kwargs: dict[str, Any] = {
        "key": key.encode() if key else None,
        "value": value.encode() if value is not None else None,
        "headers": [(k, v.encode()) for k, v in headers],
        "on_delivery": delivered,
    }
    if partition is not None:
        kwargs["partition"] = partition
    try:
        producer.produce(topic, **kwargs)
    except Exception as e:
        raise ConsoleError(f"produce to {topic}: {e}") from None
    producer.flush(15)
    if "msg" not in result:
        raise ConsoleError(f"produce to {topic}: no acknowledgement within 15 s")
    if result["err"] is not None:
        raise ConsoleError(f"produce to {topic}: {result['err'].str()}")
    return result["msg"].partition(), result["msg"].offset()


__all__ = ["Browse", "Decoder", "Message", "browse", "produce"]
