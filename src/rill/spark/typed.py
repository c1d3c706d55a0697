"""Typed keys and values: records in Confluent's wire format decoded through a schema registry.

With ``valueFormat=avro`` (``keyFormat=avro``) and ``schemaRegistryUrl``, the ``value`` (``key``) column is
the Avro data decoded into Spark types (``rill.spark.avro_types``) instead of bytes; ``json`` and ``protobuf``
decode JSON Schema and Protobuf records the same way (``rill.spark.json_types``, ``rill.spark.protobuf_types``:
the reader schema gives the column's type; a JSON document is read as it is, a Protobuf message with the
reader's message of the name the record's writer schema and message indexes give, so fields added or removed
since read as Protobuf reads them). The column's type is the
*reader schema*: the subject's latest version (or ``valueSchemaVersion``) when the query is planned. Each
record names its *writer schema* by id (magic byte 0, 4-byte id, Avro binary); executors fetch each id once
per process over HTTP (blocking) and resolve the record to the reader schema with Avro's resolution rules
(fastavro): fields the reader added take their defaults, fields it dropped are skipped.

The subject is ``<topic>-value`` / ``<topic>-key`` (TopicNameStrategy, what Confluent's serializers
register) when the source reads one topic, else ``valueSubject`` / ``keySubject`` must name it.

``decodeMode=FAILFAST`` (default) fails the task on a record that cannot be decoded, naming its topic,
partition and offset; ``PERMISSIVE`` sets the column to null and says why in an extra ``decodeError``
string column (null for records that decoded).
"""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from rill.registry import wire
from rill.registry.avro_limits import has_free_items
from rill.spark.avro_types import AvroTypeError, converter, has_record_union, spark_type

FORMATS = ("binary", "avro", "json", "protobuf")
SCHEMA_TYPES = {"avro": "AVRO", "json": "JSON", "protobuf": "PROTOBUF"}
MODES = ("FAILFAST", "PERMISSIVE")
ERROR_COLUMN = "decodeError"
HTTP_TIMEOUT_S = 30.0
ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"


class TypedError(ValueError):
    """A typed read that cannot be set up (an option, a subject or a schema); the message says which."""


class DecodeError(RuntimeError):
    """A record that does not decode with ``decodeMode=FAILFAST``."""


# -- the registry (blocking HTTP, used on the driver and on executors) ---------------------------------------


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    subject: str
    version: int
    schema_id: int
    schema: str  # as registered: Avro or JSON Schema text, a Protobuf schema's base64 descriptor
    schema_type: str = "AVRO"
    references: tuple[tuple[str, str, int], ...] = ()  # (name, subject, version)


class RegistryClient:
    """The few calls of Confluent's REST API a reader needs. Schemas by id never change, so they are cached
    for the life of the process (shared by the tasks an executor runs)."""

    _by_id: dict[tuple[str, int], RegisteredSchema] = {}  # one cache per process, on purpose
    _lock = threading.Lock()

    def __init__(self, url: str, timeout_s: float = HTTP_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(self.url + path, headers={"Accept": ACCEPT})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read())
                detail = f"error {body.get('error_code')}: {body.get('message')}"
            except ValueError:
                detail = f"HTTP {e.code}"
            raise TypedError(f"schema registry {self.url}: GET {path}: {detail}") from None
        except OSError as e:
            raise TypedError(f"schema registry {self.url} unreachable: {e}") from None

    def subjects(self) -> list[str]:
        return [str(s) for s in self._get("/subjects")]

    def format_of(self, subject: str) -> str:
        """``avro``, ``json`` or ``protobuf``: the type of the subject's latest version."""
        body = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/latest")
        kind = str(body.get("schemaType") or "AVRO")
        for fmt, name in SCHEMA_TYPES.items():
            if name == kind:
                return fmt
        raise TypedError(f"subject {subject} holds a {kind} schema, which cannot be decoded")

    def version(self, subject: str, version: int | None, fmt: str = "avro") -> RegisteredSchema:
        which = "latest" if version is None else str(version)
        serialized = "?format=serialized" if fmt == "protobuf" else ""
        body = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{which}{serialized}")
        _check_kind(body, f"subject {subject} version {body.get('version')}", fmt)
        return RegisteredSchema(subject, int(body["version"]), int(body["id"]), str(body["schema"]),
                                SCHEMA_TYPES[fmt], _references(body))  # fmt: skip

    def schema(self, schema_id: int, fmt: str = "avro") -> RegisteredSchema:
        key = (self.url, schema_id)
        found = self._by_id.get(key)
        if found is None:
            serialized = "?format=serialized" if fmt == "protobuf" else ""
            body = self._get(f"/schemas/ids/{schema_id}{serialized}")
            _check_kind(body, f"schema id {schema_id}", fmt)
            found = RegisteredSchema("", -1, schema_id, str(body["schema"]), SCHEMA_TYPES[fmt], _references(body))
            with self._lock:
                self._by_id[key] = found
        return found

    def referenced(self, schema: RegisteredSchema) -> list[tuple[str, str]]:
        """Every schema ``schema`` references, directly or not, dependencies first: (reference name, text)."""
        out: list[tuple[str, str]] = []
        seen: set[tuple[str, int]] = set()
        fmt = "protobuf" if schema.schema_type == "PROTOBUF" else "json"

        def visit(refs: tuple[tuple[str, str, int], ...], depth: int) -> None:
            if depth > 32:
                raise TypedError("schema references nest more than 32 deep")
            for name, subject, version in refs:
                if (subject, version) in seen:
                    continue
                seen.add((subject, version))
                found = self.version(subject, version, fmt)
                visit(found.references, depth + 1)
                out.append((name, found.schema))

        visit(schema.references, 0)
        return out


def _references(body: Mapping[str, Any]) -> tuple[tuple[str, str, int], ...]:
    return tuple((str(r["name"]), str(r["subject"]), int(r["version"])) for r in body.get("references") or [])


def _check_kind(body: Mapping[str, Any], what: str, fmt: str) -> None:
    kind = body.get("schemaType") or "AVRO"
    if kind != SCHEMA_TYPES[fmt]:
        raise TypedError(f"{what} is a {kind} schema, not {SCHEMA_TYPES[fmt]} as {fmt} decoding needs")
    if kind == "AVRO" and body.get("references"):
        raise TypedError(f"{what} uses schema references, which the rill source does not resolve for Avro")


# -- options --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypedColumn:
    """One decoded column: where its schema comes from, and (once resolved on the driver) the reader schema."""

    subject: str | None
    version: int | None  # None: the latest version
    reader: RegisteredSchema | None = None
    fmt: str = "avro"


@dataclass(frozen=True, slots=True)
class TypedOptions:
    registry_url: str
    key: TypedColumn | None
    value: TypedColumn | None
    permissive: bool

    @property
    def resolved(self) -> bool:
        return all(c is None or c.reader is not None for c in (self.key, self.value))


def _format(options: Mapping[str, str], name: str) -> str:
    fmt = options.get(name.lower(), "binary").strip().lower()
    if fmt not in FORMATS:
        raise TypedError(f"option {name} must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return fmt


def _version(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower(), "").strip()
    if raw in ("", "latest", "-1"):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise TypedError(f"option {name} must be a version number or latest, got {raw!r}") from None
    if value < 1:
        raise TypedError(f"option {name} must be a version number (1 or more) or latest, got {value}")
    return value


def parse_typed(options: Mapping[str, str]) -> TypedOptions | None:
    """The typed-read options (``options`` lowercased); None when neither key nor value is decoded."""
    key_fmt = _format(options, "keyFormat")
    value_fmt = _format(options, "valueFormat")
    mode = options.get("decodemode", "FAILFAST").strip().upper()
    if mode not in MODES:
        raise TypedError(f"option decodeMode must be FAILFAST or PERMISSIVE, got {mode!r}")
    url = options.get("schemaregistryurl", "").strip()
    if key_fmt == value_fmt == "binary":
        dependent = [
            n
            for n in ("schemaRegistryUrl", "keySubject", "valueSubject", "keySchemaVersion", "valueSchemaVersion")
            if n.lower() in options
        ]
        if dependent:
            raise TypedError(f"option {dependent[0]} needs valueFormat or keyFormat avro, json or protobuf")
        return None
    if not url:
        raise TypedError("option schemaRegistryUrl is required with valueFormat or keyFormat avro, json or protobuf")
    if not url.startswith(("http://", "https://")):
        raise TypedError(f"option schemaRegistryUrl must be an http:// or https:// URL, got {url!r}")

    def column(fmt: str, side: str) -> TypedColumn | None:
        if fmt == "binary":
            return None
        return TypedColumn(options.get(f"{side}subject") or None, _version(options, f"{side}SchemaVersion"), None,
                           fmt)  # fmt: skip

    return TypedOptions(url, column(key_fmt, "key"), column(value_fmt, "value"), mode == "PERMISSIVE")


def resolve(typed: TypedOptions, topics: list[str]) -> TypedOptions:
    """The reader schemas fetched from the registry (on the driver): the given or latest versions of the
    subjects, ``<topic>-key`` / ``<topic>-value`` when the source reads one topic."""

    def one(col: TypedColumn | None, side: str) -> TypedColumn | None:
        if col is None:
            return None
        subject = col.subject
        if subject is None:
            if len(topics) != 1:
                raise TypedError(
                    f"option {side}Subject is required when the source reads more than one topic or a pattern "
                    f"({side}Format takes the subject <topic>-{side} only for a single topic)"
                )
            subject = f"{topics[0]}-{side}"
        registry = RegistryClient(typed.registry_url)
        reader = registry.version(subject, col.version, col.fmt)
        column_type(registry, reader)  # refuses a schema that has no Spark type now, on the driver
        return TypedColumn(subject, col.version, reader, col.fmt)

    return replace(typed, key=one(typed.key, "key"), value=one(typed.value, "value"))


def base_spark_schema(include_headers: bool) -> Any:
    """The binary source schema (``rill.spark.arrow``) as a StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from rill.spark.arrow import arrow_schema

    return from_arrow_schema(arrow_schema(include_headers))


def spark_schema(base: Any, typed: TypedOptions) -> Any:
    """The source's schema (a StructType) with the decoded columns' types, and ``decodeError`` when
    permissive. A decoded column is nullable (null keys and values stay null)."""
    fields = []
    for f in base.fields:
        col = typed.key if f.name == "key" else typed.value if f.name == "value" else None
        if col is not None:
            assert col.reader is not None
            f = T.StructField(f.name, column_type(RegistryClient(typed.registry_url), col.reader), True)
        fields.append(f)
    if typed.permissive:
        fields.append(T.StructField(ERROR_COLUMN, T.StringType(), True))
    return T.StructType(fields)


# -- decoding (executors) ---------------------------------------------------------------------------------


class _Parsed:
    """Parsed schemas, per process: fastavro's parse is costly, and each writer schema recurs."""

    cache: dict[str, Any] = {}
    free_items: dict[str, bool] = {}  # has_free_items of each writer schema

    @classmethod
    def get(cls, text: str) -> Any:
        found = cls.cache.get(text)
        if found is None:
            import fastavro

            found = fastavro.parse_schema(json.loads(text))
            cls.cache[text] = found
        return found

    @classmethod
    def writer(cls, text: str) -> Any:
        """A writer schema, parsed; ValueError when its records may claim items that take no byte (a few
        bytes would then cost the reader any memory and time they say)."""
        free = cls.free_items.get(text)
        if free is None:
            free = cls.free_items[text] = has_free_items(json.loads(text))
        if free:
            raise ValueError("the writer schema has an array of items that take no byte: not decoded")
        return cls.get(text)


def column_type(registry: RegistryClient, reader: RegisteredSchema) -> Any:
    """The Spark type of a column read with ``reader``; TypedError when it has none."""
    where = f"subject {reader.subject} version {reader.version}"
    try:
        if reader.schema_type == "JSON":
            from rill.spark.json_types import JsonSchemaWalker

            refs = {name: json.loads(text) for name, text in registry.referenced(reader)}
            return JsonSchemaWalker(json.loads(reader.schema), refs).spark_type()
        if reader.schema_type == "PROTOBUF":
            from rill.spark import protobuf_types as pt

            file = pt.load([*registry.referenced(reader), ("schema.proto", reader.schema)])
            return pt.spark_type(pt.message_by_indexes(file, [0]))
        return spark_type(json.loads(reader.schema))[0]
    except (AvroTypeError, ValueError) as e:
        raise TypedError(f"{where}: {e}") from None


class _Decoder:
    """Decodes one column (key or value) of Arrow batches from wire-format bytes into the reader's type."""

    reader: RegisteredSchema
    arrow_type: pa.DataType

    def decode(self, value: bytes) -> Any:
        raise NotImplementedError

    def column(
        self, values: pa.Array, errors: list[str | None] | None, where: tuple[str, int, pa.Array], side: str
    ) -> pa.Array:
        out: list[Any] = []
        for row, value in enumerate(values.to_pylist()):
            if value is None:
                out.append(None)
                continue
            try:
                out.append(self.decode(value))
            except (TypedError, wire.WireFormatError, ValueError, EOFError, KeyError, TypeError, IndexError,
                    RecursionError) as e:  # fmt: skip
                topic, partition, offsets = where
                message = (
                    f"cannot decode the {side} of {topic}-{partition} at offset {offsets[row].as_py()} with "
                    f"subject {self.reader.subject} version {self.reader.version}: {type(e).__name__}: {e}"
                )
                if errors is None:
                    raise DecodeError(message + " (decodeMode=PERMISSIVE reads it as null)") from e
                out.append(None)
                errors[row] = message if errors[row] is None else f"{errors[row]}; {message}"
        return pa.array(out, type=self.arrow_type)


class ColumnDecoder(_Decoder):
    """Avro: each record resolved from its writer schema to the reader schema (fastavro)."""

    def __init__(self, registry: RegistryClient, reader: RegisteredSchema, arrow_type: pa.DataType) -> None:
        raw = json.loads(reader.schema)
        self.registry = registry
        self.reader = reader
        self.arrow_type = arrow_type
        self.convert = converter(raw)
        self.parsed = _Parsed.get(reader.schema)
        # fastavro names the branch of a union that holds records: needed to fill Spark's union struct.
        self.kwargs: dict[str, Any] = (
            {"return_record_name": True, "return_record_name_override": True} if has_record_union(raw) else {}
        )

    def decode(self, value: bytes) -> Any:
        from fastavro import schemaless_reader

        schema_id, payload = wire.decode(value)
        writer_text = self.registry.schema(schema_id).schema
        writer = _Parsed.writer(writer_text)
        # Resolution costs half the read: skip it when the record was written with the reader schema.
        reader = None if schema_id == self.reader.schema_id or writer_text == self.reader.schema else self.parsed
        buffer = io.BytesIO(payload)
        out = schemaless_reader(buffer, writer, reader, **self.kwargs)
        if buffer.tell() != len(payload):
            raise ValueError(f"{len(payload) - buffer.tell()} bytes left after the record (wrong writer schema?)")
        return self.convert(out) if self.convert is not None else out


class JsonColumnDecoder(_Decoder):
    """JSON Schema: the document as it is, shaped to the reader schema's type."""

    def __init__(self, reader: RegisteredSchema, spark: Any, arrow_type: pa.DataType) -> None:
        from rill.spark.json_types import converter as json_converter

        self.reader = reader
        self.arrow_type = arrow_type
        self.convert = json_converter(spark)

    def decode(self, value: bytes) -> Any:
        _schema_id, payload = wire.decode(value)
        return self.convert(json.loads(payload))


class ProtobufColumnDecoder(_Decoder):
    """Protobuf: parsed with the reader schema's message of the name the writer schema's indexes give."""

    def __init__(self, registry: RegistryClient, reader: RegisteredSchema, arrow_type: pa.DataType) -> None:
        from rill.spark import protobuf_types as pt

        self.pt = pt
        self.registry = registry
        self.reader = reader
        self.arrow_type = arrow_type
        self.file = pt.load([*registry.referenced(reader), ("schema.proto", reader.schema)])
        self.writers: dict[tuple[int, tuple[int, ...]], Any] = {}

    def _message_class(self, schema_id: int, indexes: list[int]) -> Any:
        key = (schema_id, tuple(indexes))
        found = self.writers.get(key)
        if found is None:
            pt = self.pt
            writer = self.registry.schema(schema_id, "protobuf")
            writer_file = pt.load([*self.registry.referenced(writer), ("writer.proto", writer.schema)])
            name = pt.message_by_indexes(writer_file, indexes).full_name
            try:
                desc = self.file.pool.FindMessageTypeByName(name)
            except KeyError:
                raise ValueError(f"the reader schema has no message {name}") from None
            found = self.writers[key] = pt.message_class(desc)
        return found

    def decode(self, value: bytes) -> Any:
        schema_id, payload = wire.decode(value)
        indexes, start = self.pt.read_indexes(payload)
        message = self._message_class(schema_id, indexes)()
        try:
            message.ParseFromString(payload[start:])
        except Exception as e:  # protobuf's DecodeError
            raise ValueError(f"not a Protobuf message: {e}") from None
        return self.pt.to_value(message)


def decoder_for(registry: RegistryClient, reader: RegisteredSchema, arrow_type: pa.DataType) -> _Decoder:
    if reader.schema_type == "JSON":
        return JsonColumnDecoder(reader, column_type(registry, reader), arrow_type)
    if reader.schema_type == "PROTOBUF":
        return ProtobufColumnDecoder(registry, reader, arrow_type)
    return ColumnDecoder(registry, reader, arrow_type)


class BatchDecoder:
    """Turns the source's binary batches into typed ones (``schema``: the Arrow form of ``spark_schema``)."""

    def __init__(self, typed: TypedOptions, base: Any) -> None:
        if not typed.resolved:
            raise TypedError("the typed read was not resolved on the driver")
        self.schema = to_arrow_schema(spark_schema(base, typed), timezone="UTC")
        self.permissive = typed.permissive
        registry = RegistryClient(typed.registry_url)
        self.decoders: dict[str, _Decoder] = {}
        for side, col in (("key", typed.key), ("value", typed.value)):
            if col is not None and col.reader is not None:
                self.decoders[side] = decoder_for(registry, col.reader, self.schema.field(side).type)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        errors: list[str | None] | None = [None] * n if self.permissive else None
        topic = batch.column("topic")[0].as_py() if n else ""
        partition = batch.column("partition")[0].as_py() if n else -1
        where = (topic, partition, batch.column("offset"))
        arrays = []
        for name in batch.schema.names:
            column = batch.column(name)
            decoder = self.decoders.get(name)
            arrays.append(column if decoder is None else decoder.column(column, errors, where, name))
        if errors is not None:
            arrays.append(pa.array(errors, pa.string()))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


__all__ = [
    "BatchDecoder",
    "DecodeError",
    "RegisteredSchema",
    "RegistryClient",
    "TypedColumn",
    "TypedError",
    "TypedOptions",
    "base_spark_schema",
    "parse_typed",
    "resolve",
    "spark_schema",
]
