"""Schemas built to make the registry work hard: each request must be answered in bounded time, and the
registry must go on serving others meanwhile."""

from __future__ import annotations

import base64
import functools
import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from rill.registry.server import RegistryThread


def _post(reg: RegistryThread, path: str, body: Any, timeout: float = 60.0) -> tuple[int, Any]:
    request = urllib.request.Request(reg.url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _node(width: int, closed: bool) -> dict[str, Any]:
    """An object whose ``width`` properties are each this same schema again (through the reference node.json)."""
    doc: dict[str, Any] = {"type": "object", "properties": {f"p{i}": {"$ref": "node.json"} for i in range(width)}}
    if closed:
        doc["additionalProperties"] = False
    return doc


def test_a_recursive_json_schema_checks_compatibility_in_bounded_time(reg: RegistryThread) -> None:
    for subject, closed in (("node-open", False), ("node-closed", True)):
        status, body = _post(reg, f"/subjects/{subject}/versions",
                             {"schemaType": "JSON", "schema": json.dumps(_node(4, closed))})  # fmt: skip
        assert status == 200, body
    tree = json.dumps({"$ref": "node.json"})
    status, body = _post(reg, "/subjects/tree-value/versions", {"schemaType": "JSON", "schema": tree,
                         "references": [{"name": "node.json", "subject": "node-open", "version": 1}]})  # fmt: skip
    assert status == 200, body
    # the same recursive shape, closed: every pair of nodes of the two trees differs, so a checker that walks the
    # unrolled trees visits 4**depth pairs
    started = time.monotonic()
    status, body = _post(reg, "/compatibility/subjects/tree-value/versions/latest",
                         {"schemaType": "JSON", "schema": tree,
                          "references": [{"name": "node.json", "subject": "node-closed", "version": 1}]})  # fmt: skip
    took = time.monotonic() - started
    assert status == 200, body
    assert body["is_compatible"] is False
    assert took < 10.0, f"the check took {took:.1f} s"


def test_a_changed_local_definition_is_checked(reg: RegistryThread) -> None:
    def schema(kind: str) -> str:
        return json.dumps({"type": "object", "properties": {"a": {"$ref": "#/definitions/n"}},
                           "definitions": {"n": {"type": kind}}})  # fmt: skip

    status, body = _post(reg, "/subjects/local-ref-value/versions", {"schemaType": "JSON", "schema": schema("number")})
    assert status == 200, body
    # a string where numbers were written cannot read the old documents; an integer-or-number widening can
    status, body = _post(reg, "/compatibility/subjects/local-ref-value/versions/latest",
                         {"schemaType": "JSON", "schema": schema("string")})  # fmt: skip
    assert (status, body["is_compatible"]) == (200, False), body


def _descriptor(**field: Any) -> str:
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    message = fdp.message_type.add(name="Order")
    message.field.add(name="id", number=1, label=fd.LABEL_OPTIONAL, type=fd.TYPE_STRING)
    message.field.add(**{"name": "extra", "number": 2, "label": fd.LABEL_OPTIONAL, **field})
    return base64.standard_b64encode(fdp.SerializeToString()).decode()


def test_a_protobuf_descriptor_sent_by_a_client_is_checked_as_protoc_checks_text(reg: RegistryThread) -> None:
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FieldDescriptorProto
    status, body = _post(reg, "/subjects/descriptor-ok-value/versions",
                         {"schemaType": "PROTOBUF", "schema": _descriptor(type=fd.TYPE_INT64)})  # fmt: skip
    assert status == 200, body
    for broken in (_descriptor(type=fd.TYPE_MESSAGE, type_name=".nowhere.Missing"),  # a type that does not exist
                   _descriptor(type=fd.TYPE_INT64, oneof_index=7),  # a oneof the message does not declare
                   _descriptor(type=fd.TYPE_INT64, name="id")):  # a field name used twice
        status, body = _post(reg, "/subjects/descriptor-broken-value/versions",
                             {"schemaType": "PROTOBUF", "schema": broken})  # fmt: skip
        assert (status, body.get("error_code")) == (422, 42201), body
    status, body = _post(reg, "/subjects/descriptor-broken-value/versions", {"schemaType": "PROTOBUF", "schema":
                         _descriptor(type=fd.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")})  # fmt: skip
    assert (status, body.get("error_code")) == (422, 42201), body  # it does not import timestamp.proto


def _zigzag(n: int) -> bytes:
    n, out = (n << 1) ^ (n >> 63), bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes([*out, n])


def test_the_spark_decoders_answer_a_hostile_record_with_its_row_s_error(reg: RegistryThread) -> None:
    """The executors' decoders (rill.spark.typed) on records that cost far more to read than their size."""
    import pyarrow as pa

    from rill.spark.typed import ColumnDecoder, JsonColumnDecoder, RegistryClient

    client = RegistryClient(reg.url)
    where = ("hostile", 0, pa.array([0, 1]))
    status, body = _post(reg, "/subjects/free-items-value/versions",
                         {"schema": json.dumps({"type": "array", "items": "null"})})  # fmt: skip
    assert status == 200, body
    avro = client.version("free-items-value", None)
    decoder = ColumnDecoder(client, avro, pa.list_(pa.null()))
    framed = b"\0" + avro.schema_id.to_bytes(4, "big")
    errors: list[str | None] = [None, None]
    started = time.monotonic()
    # a few bytes claiming five million nulls (Avro spends no byte on a null: 2**62 costs ten bytes as well, and a
    # reader's memory and time), and an honest record: a schema that allows it is not read at all
    column = decoder.column(pa.array([framed + _zigzag(5_000_000) + _zigzag(0), framed + _zigzag(2) + _zigzag(0)]),
                            errors, where, "value")  # fmt: skip
    assert time.monotonic() - started < 10
    assert column.to_pylist() == [None, None] and all("no byte" in (e or "") for e in errors), errors

    status, body = _post(reg, "/subjects/deep-json-value/versions",
                         {"schemaType": "JSON", "schema": json.dumps({"type": "array"})})  # fmt: skip
    assert status == 200, body
    json_schema = client.version("deep-json-value", None, "json")
    from pyspark.sql import types as T

    decoder_json = JsonColumnDecoder(json_schema, T.ArrayType(T.LongType()), pa.list_(pa.int64()))
    framed = b"\0" + json_schema.schema_id.to_bytes(4, "big")
    errors = [None, None]
    column = decoder_json.column(pa.array([framed + b"[" * 100_000 + b"]" * 100_000, framed + b"[1]"]), errors,
                                 where, "value")  # fmt: skip
    assert errors[0] and errors[1] is None, errors


def _protoc_children() -> int:
    """protoc processes this process runs now (the registry runs in a thread of it)."""
    count = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            if ppid != os.getpid():
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                count += b"grpc_tools.protoc" in f.read()
        except (OSError, ValueError, IndexError):
            continue
    return count


def test_protoc_runs_a_bounded_number_of_times_at_once(reg: RegistryThread) -> None:
    """Each .proto text sent is compiled by a protoc process: many sent at once must not start as many."""
    results: list[int] = []
    peak = 0
    texts = [f'syntax = "proto3";\npackage burst{i};\nmessage M{i} {{ string a = 1; }}\n' for i in range(12)]
    threads = [threading.Thread(target=lambda i=i, t=t: results.append(
        _post(reg, f"/subjects/burst-{i}-value/versions", {"schemaType": "PROTOBUF", "schema": t}, timeout=120)[0]))
        for i, t in enumerate(texts)]  # fmt: skip
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        peak = max(peak, _protoc_children())
        time.sleep(0.01)
    assert results == [200] * 12
    assert 1 <= peak <= max(2, os.cpu_count() or 1), f"{peak} protoc processes at once"


def test_json_nested_past_the_parser_s_depth_is_refused_as_invalid(reg: RegistryThread) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for depth in (400, 900):  # JSON the parser takes, nested deeper than the checks go
        nested = json.dumps(functools.reduce(lambda inner, _: {"type": "array", "items": inner}, range(depth),
                                             {"type": "string"}))  # fmt: skip
        status, body = _post(reg, f"/subjects/nested-{depth}-value/versions", {"schemaType": "JSON", "schema": nested})
        assert status in (200, 422), body
    status, body = _post(reg, "/subjects/deep-value/versions", {"schemaType": "JSON", "schema": deep})
    assert (status, body.get("error_code")) == (422, 42201), body
    status, body = _post(reg, "/subjects/deep-value/versions", {"schema": deep})  # Avro
    assert (status, body.get("error_code")) == (422, 42201), body
    request = urllib.request.Request(reg.url + "/subjects/deep-value/versions", data=deep.encode(), method="POST",
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})  # fmt: skip
    try:
        urllib.request.urlopen(request, timeout=60)
        raise AssertionError("a body nested that deep was taken")
    except urllib.error.HTTPError as e:
        assert e.code == 400, e.read()
