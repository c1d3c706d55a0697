"""Protobuf messages to Spark types, and decoded messages to the values Arrow takes for them, as Spark's
``from_protobuf`` maps them::

    Protobuf                                         Spark
    message                                          struct (one nullable field per field)
    int32, sint32, sfixed32                          int
    int64, sint64, sfixed64, uint32, fixed32         long
    uint64, fixed64                                  long (values above 2^63 wrap, as in Spark)
    float / double / bool / string / bytes           float / double / boolean / string / binary
    enum                                             string (the value's name; its number when unnamed)
    repeated T                                       array<T>
    map<K, V>                                        map<K, V>
    google.protobuf.Timestamp                        timestamp (UTC)
    a message that contains itself                   refused (as Spark does by default)

The descriptors come from the registry (``?format=serialized``: base64 ``FileDescriptorProto``s, the
schema's references first), built into a pool of their own with Google's well-known types.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import timestamp_pb2 as _timestamp  # noqa: F401 - puts the well-known types in the default pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql import types as T

Convert = Callable[[Any], Any]
TIMESTAMP = "google.protobuf.Timestamp"
_UTC = datetime.UTC
_INTS = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32}
_LONGS = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64,
          FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32}  # fmt: skip
_UNSIGNED64 = {FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64}


class ProtobufTypeError(ValueError):
    """A Protobuf schema Rill cannot give a Spark type (a recursive message, say)."""


def load(files: Sequence[tuple[str, str]]) -> Any:
    """A descriptor pool holding ``files`` (import name, base64 descriptor), dependencies first; the last one
    is the schema itself. Returns its FileDescriptor."""
    pool = descriptor_pool.DescriptorPool()
    for wk in _well_known():
        pool.Add(wk)
    found = None
    for name, encoded in files:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.standard_b64decode(encoded))
        fdp.name = name
        pool.Add(fdp)
        found = pool.FindFileByName(name)
    if found is None:
        raise ProtobufTypeError("no Protobuf schema to load")
    return found


def _well_known() -> list[descriptor_pb2.FileDescriptorProto]:
    from google.protobuf import any_pb2, duration_pb2, empty_pb2, struct_pb2, timestamp_pb2, wrappers_pb2

    out = []
    for module in (any_pb2, duration_pb2, empty_pb2, struct_pb2, timestamp_pb2, wrappers_pb2):
        fdp = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fdp)
        out.append(fdp)
    return out


def message_by_indexes(file: Any, indexes: Sequence[int]) -> Descriptor:
    """The message Confluent's message indexes name: the top-level message at the first index, then nested."""
    if not file.message_types_by_name:
        raise ProtobufTypeError("the schema has no message")
    messages = list(file.message_types_by_name.values())
    path = list(indexes) or [0]
    if path[0] >= len(messages):
        raise ValueError(f"message index {path[0]} out of range")
    desc: Descriptor = messages[path[0]]
    for i in path[1:]:
        if i >= len(desc.nested_types):
            raise ValueError(f"nested message index {i} out of range")
        desc = desc.nested_types[i]
    return desc


def spark_type(desc: Descriptor, seen: tuple[str, ...] = ()) -> Any:
    if desc.full_name in seen:
        raise ProtobufTypeError(f"message {desc.full_name} contains itself: a recursive message has no Spark type")
    if desc.full_name == TIMESTAMP:
        return T.TimestampType()
    fields = [T.StructField(f.name, _field_type(f, (*seen, desc.full_name)), True) for f in desc.fields]
    return T.StructType(fields)


def _is_map(f: FieldDescriptor) -> bool:
    return bool(f.type == FieldDescriptor.TYPE_MESSAGE and f.message_type.GetOptions().map_entry)


def _field_type(f: FieldDescriptor, seen: tuple[str, ...]) -> Any:
    if _is_map(f):
        key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return T.MapType(_scalar_type(key, seen), _scalar_type(value, seen), True)
    element = _scalar_type(f, seen)
    return T.ArrayType(element, True) if f.is_repeated else element


def _scalar_type(f: FieldDescriptor, seen: tuple[str, ...]) -> Any:
    t = f.type
    if t in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return spark_type(f.message_type, seen)
    if t in _INTS:
        return T.IntegerType()
    if t in _LONGS or t in _UNSIGNED64:
        return T.LongType()
    simple = {FieldDescriptor.TYPE_FLOAT: T.FloatType(), FieldDescriptor.TYPE_DOUBLE: T.DoubleType(),
              FieldDescriptor.TYPE_BOOL: T.BooleanType(), FieldDescriptor.TYPE_STRING: T.StringType(),
              FieldDescriptor.TYPE_BYTES: T.BinaryType(), FieldDescriptor.TYPE_ENUM: T.StringType()}  # fmt: skip
    return simple[t]


def message_class(desc: Descriptor) -> Any:
    return message_factory.GetMessageClass(desc)


def to_value(message: Any) -> Any:
    """A decoded message as the dicts, lists and scalars Arrow takes for its ``spark_type``."""
    desc = message.DESCRIPTOR
    if desc.full_name == TIMESTAMP:
        return datetime.datetime.fromtimestamp(message.seconds + message.nanos / 1e9, _UTC)
    out: dict[str, Any] = {}
    for f in desc.fields:
        value = getattr(message, f.name)
        if _is_map(f):
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = [(k, _scalar(vf, v)) for k, v in value.items()]
        elif f.is_repeated:
            out[f.name] = [_scalar(f, v) for v in value]
        elif f.has_presence and not message.HasField(f.name):  # an unset message, or an unset optional
            out[f.name] = None
        else:
            out[f.name] = _scalar(f, value)
    return out


def _scalar(f: FieldDescriptor, value: Any) -> Any:
    if f.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return to_value(value)
    if f.type == FieldDescriptor.TYPE_ENUM:
        named = f.enum_type.values_by_number.get(value)
        return named.name if named is not None else str(value)
    if f.type in _UNSIGNED64 and value >= 1 << 63:
        return value - (1 << 64)
    return value


def read_indexes(payload: bytes) -> tuple[list[int], int]:
    """Confluent's message indexes at the start of a Protobuf payload (zigzag varints: a count, then the
    indexes; a single 0 means [0]) and where the message starts."""
    count, pos = _zigzag(payload, 0)
    if count < 0 or count > 64:
        raise ValueError(f"bad message index count {count}")
    indexes = []
    for _ in range(count):
        index, pos = _zigzag(payload, pos)
        indexes.append(index)
    return indexes or [0], pos


def _zigzag(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated message indexes")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
    return (result >> 1) ^ -(result & 1), pos
