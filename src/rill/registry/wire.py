"""Confluent's wire format: how a serialized key or value names its schema.

A framed payload is ``0x00`` (the magic byte), the schema's global id as a 4-byte big-endian signed
integer, then the serialized data (Avro binary for Avro schemas). This is the "schema id in every
message" that lets any consumer fetch the writer's schema from the registry.
"""

from __future__ import annotations

import struct

MAGIC_BYTE = 0
HEADER = struct.Struct(">bi")


class WireFormatError(ValueError):
    pass


def encode(schema_id: int, payload: bytes) -> bytes:
    """Frame ``payload`` as written with schema ``schema_id``."""
    if not 0 <= schema_id < 2**31:
        raise WireFormatError(f"schema id {schema_id} out of range")
    return HEADER.pack(MAGIC_BYTE, schema_id) + payload


def decode(data: bytes) -> tuple[int, bytes]:
    """``(schema id, payload)`` of a framed value; WireFormatError unless it starts with the magic byte."""
    if len(data) < HEADER.size:
        raise WireFormatError(f"{len(data)} bytes: too short for the 5-byte header")
    magic, schema_id = HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise WireFormatError(f"unknown magic byte {magic}")
    return schema_id, bytes(data[HEADER.size :])
