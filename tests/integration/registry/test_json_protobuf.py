"""JSON Schema and Protobuf through confluent-kafka's schema registry client and its JSON and Protobuf serdes,
unchanged, against the registry on a Rill broker: register, evolve, refuse an incompatible change, serialize
and deserialize through a topic, and references in each format."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext, SerializationError

from rill.registry.server import RegistryThread
from rill.testing import TestBroker

ADDRESS = {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string"}},
           "required": ["street"]}  # fmt: skip
CUSTOMER = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Customer",
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                   "address": {"$ref": "address.json"}},
    "required": ["name"],
}  # fmt: skip

COMMON_PROTO = """syntax = "proto3";
package shop;
message Address {
  string street = 1;
  string zip = 2;
}
"""
ORDER_PROTO = """syntax = "proto3";
package shop;
import "common.proto";
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  shop.Address address = 2;
  google.protobuf.Timestamp at = 3;
  repeated int64 items = 4;
  map<string, string> tags = 5;
  oneof payment { string card = 6; string voucher = 7; }
}
"""


def _client(reg: RegistryThread) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": reg.url})


def _round_trip(broker: TestBroker, topic: str, serialize: Any, deserialize: Any, values: list[Any]) -> list[Any]:
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for v in values:
        producer.produce(topic, value=serialize(v, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    out: list[Any] = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(deserialize(msg.value(), SerializationContext(topic, MessageField.VALUE)))
            if len(out) == len(values):
                break
    finally:
        consumer.close()
    return out


def test_json_schema_with_a_reference_round_trip_and_evolution(broker: TestBroker, reg: RegistryThread) -> None:
    sr = _client(reg)
    sr.register_schema("address.json", Schema(json.dumps(ADDRESS), "JSON"))
    refs = [SchemaReference("address.json", "address.json", 1)]
    customer = Schema(json.dumps(CUSTOMER), "JSON", refs)
    serializer = JSONSerializer(customer, sr)
    deserializer = JSONDeserializer(None, schema_registry_client=sr)
    values = [{"name": "ann", "age": 31, "address": {"street": "Main 1", "zip": "1000"}}, {"name": "bob"}]
    assert _round_trip(broker, "customers-json", serializer, deserializer, values) == values
    with pytest.raises(SerializationError):  # the referenced schema's rules hold too: street is required
        serializer({"name": "cy", "address": {"zip": "9"}}, SerializationContext("customers-json", MessageField.VALUE))

    subject = "customers-json-value"
    registered = sr.get_latest_version(subject)
    assert registered.schema.schema_type == "JSON" and registered.schema.references[0].name == "address.json"
    # a widened type is a compatible change (BACKWARD, the default) ...
    v2 = {**CUSTOMER, "properties": {**CUSTOMER["properties"], "age": {"type": "number"}}}
    assert sr.register_schema(subject, Schema(json.dumps(v2), "JSON", refs)) > registered.schema_id
    # ... a narrowed type, a new required property, or (as in Confluent's registry) a new property in an open
    # content model are not: 409 with error code 409
    for broken, why in (({**v2, "properties": {**v2["properties"], "name": {"type": "integer"}}}, "TYPE_NARROWED"),
                        ({**v2, "required": ["name", "age"]}, "REQUIRED_PROPERTY_ADDED"),
                        ({**v2, "properties": {**v2["properties"], "email": {"type": "string"}}},
                         "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")):  # fmt: skip
        with pytest.raises(SchemaRegistryError) as info:
            sr.register_schema(subject, Schema(json.dumps(broken), "JSON", refs))
        assert (info.value.http_status_code, info.value.error_code) == (409, 409)
        assert why in info.value.error_message
    with pytest.raises(SchemaRegistryError) as info:
        sr.register_schema("bad-json", Schema(json.dumps({"type": "no-such-type"}), "JSON"))
    assert info.value.error_code == 42201
    with pytest.raises(SchemaRegistryError) as info:  # a referenced schema is not deleted while referenced
        sr.delete_version("address.json", 1)
    assert info.value.error_code == 42206


@pytest.fixture(scope="module")
def protos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """``order_pb2`` generated by protoc from ORDER_PROTO (with ``common_pb2``), as users generate theirs."""
    src = tmp_path_factory.mktemp("proto-src")
    out = tmp_path_factory.mktemp("proto-py")
    (src / "common.proto").write_text(COMMON_PROTO)
    (src / "order.proto").write_text(ORDER_PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"--python_out={out}", "common.proto",
                    "order.proto"], check=True, capture_output=True, timeout=60)  # fmt: skip
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("order_pb2")
    finally:
        sys.path.remove(str(out))
        for name in ("order_pb2", "common_pb2"):
            sys.modules.pop(name, None)


def test_protobuf_with_an_import_round_trip_and_evolution(broker: TestBroker, reg: RegistryThread,
                                                          protos: ModuleType) -> None:  # fmt: skip
    sr = _client(reg)
    Order = protos.Order
    serializer = ProtobufSerializer(Order, sr, {"use.deprecated.format": False})
    deserializer = ProtobufDeserializer(Order, {"use.deprecated.format": False})
    orders = [Order(id="o-1", items=[1, 2], tags={"k": "v"}, card="4242"), Order(id="o-2", voucher="free")]
    orders[0].address.street = "Main 1"
    orders[0].at.seconds = 1_700_000_000
    assert _round_trip(broker, "orders-proto", serializer, deserializer, orders) == orders

    # the serializer registered common.proto under its file name and the order schema with a reference to it
    subject = "orders-proto-value"
    latest = sr.get_latest_version(subject)
    assert latest.schema.schema_type == "PROTOBUF"
    assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [("common.proto", "common.proto", 1)]
    assert "message Order {" in latest.schema.schema_str and "map<string, string> tags = 5;" in latest.schema.schema_str
    # the same schema given as .proto text is the same schema: same id, no new version
    refs = [SchemaReference("common.proto", "common.proto", 1)]
    assert sr.register_schema(subject, Schema(ORDER_PROTO, "PROTOBUF", refs)) == latest.schema_id
    assert sr.get_versions(subject) == [1]
    # a new field is compatible; a string field turned int32 is not
    v2 = ORDER_PROTO.replace("  map<string, string> tags = 5;", "  map<string, string> tags = 5;\n  string note = 8;")
    assert sr.register_schema(subject, Schema(v2, "PROTOBUF", refs)) != latest.schema_id
    broken = v2.replace("string id = 1;", "int32 id = 1;")
    with pytest.raises(SchemaRegistryError) as info:
        sr.register_schema(subject, Schema(broken, "PROTOBUF", refs))
    assert (info.value.http_status_code, info.value.error_code) == (409, 409)
    assert "FIELD_SCALAR_KIND_CHANGED" in info.value.error_message
    with pytest.raises(SchemaRegistryError) as info:
        sr.register_schema("bad-proto", Schema('syntax = "proto3"; message X { strin x = 1; }', "PROTOBUF"))
    assert info.value.error_code == 42201 and "strin" in info.value.error_message
    with pytest.raises(SchemaRegistryError) as info:  # an import without a reference naming it
        sr.register_schema("bad-proto", Schema(ORDER_PROTO, "PROTOBUF"))
    assert info.value.error_code == 42201
    # the deserializer reads what was written with version 1 after version 2 was registered
    assert _round_trip(broker, "orders-proto", serializer, deserializer, orders)[:2] == orders
