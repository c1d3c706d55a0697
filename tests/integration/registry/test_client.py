"""confluent-kafka's schema registry client, unchanged, against the registry on a Rill broker."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from rill.registry import wire
from rill.registry.server import RegistryThread
from rill.testing import TestBroker


def avro(fields: list[dict[str, Any]], name: str = "User") -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "fields": fields}), "AVRO")


V1 = [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]
V2 = [*V1, {"name": "email", "type": "string", "default": ""}]


def client(reg: RegistryThread) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": reg.url})


def refused(call: Any) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as info:
        call()
    return info.value


def test_avro_records_round_trip_through_a_rill_topic(broker: TestBroker, reg: RegistryThread) -> None:
    sr = client(reg)
    topic = "users-avro"
    serializer = AvroSerializer(sr, avro(V1).schema_str)
    deserializer = AvroDeserializer(sr)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    users = [{"name": f"user-{i}", "age": 20 + i} for i in range(5)]
    for user in users:
        value = serializer(user, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "avro-reader", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    raw: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(raw) < len(users) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            raw.append(msg.value())
    consumer.close()

    decoded = [deserializer(v, SerializationContext(topic, MessageField.VALUE)) for v in raw]
    assert decoded == users
    schema_id, _payload = wire.decode(raw[0])
    registered = sr.get_latest_version(f"{topic}-value")
    assert schema_id == registered.schema_id
    assert registered.version == 1
    # A fresh client (no cache) reads the writer's schema by the id in the message.
    assert json.loads(client(reg).get_schema(schema_id).schema_str) == json.loads(avro(V1).schema_str)


def test_the_same_schema_under_two_subjects_has_one_id(reg: RegistryThread) -> None:
    sr = client(reg)
    schema = avro([{"name": "x", "type": "long"}], name="Shared")
    first = sr.register_schema("shared-a", schema)
    second = sr.register_schema("shared-b", schema)
    assert first == second
    other = sr.register_schema("shared-c", avro([{"name": "y", "type": "long"}], name="Other"))
    assert other != first
    # Registering it again (whitespace differs) is the same version of the same id.
    spaced = Schema(json.dumps(json.loads(schema.schema_str), indent=4), "AVRO")
    assert client(reg).register_schema("shared-a", spaced) == first
    assert sr.get_versions("shared-a") == [1]
    holders = sorted((v.subject, v.version) for v in sr.get_schema_versions(first))
    assert holders == [("shared-a", 1), ("shared-b", 1)]
    found = client(reg).lookup_schema("shared-b", spaced)
    assert (found.schema_id, found.version) == (first, 1)
    assert (
        refused(lambda: client(reg).lookup_schema("shared-a", avro([{"name": "z", "type": "int"}]))).error_code == 40403
    )
    assert refused(lambda: client(reg).lookup_schema("no-such-subject", schema)).error_code == 40401


def test_backward_evolution_and_a_refused_change(reg: RegistryThread) -> None:
    sr = client(reg)
    subject = "evolve-value"
    first = sr.register_schema(subject, avro(V1))
    second = sr.register_schema(subject, avro(V2))  # a new field with a default: BACKWARD compatible
    assert second != first
    assert sr.get_versions(subject) == [1, 2]

    breaking = avro([*V2, {"name": "phone", "type": "string"}])  # no default: old data cannot be read
    assert sr.test_compatibility(subject, breaking) is False
    assert sr.test_compatibility(subject, avro([*V2, {"name": "p", "type": "string", "default": "-"}])) is True
    e = refused(lambda: sr.register_schema(subject, breaking))
    assert (e.http_status_code, e.error_code) == (409, 409)
    assert "incompatible" in e.error_message
    assert sr.get_versions(subject) == [1, 2]  # the refusal changed nothing


def test_verbose_compatibility_names_the_problem(reg: RegistryThread, http: Any) -> None:
    sr = client(reg)
    sr.register_schema("verbose-value", avro(V1))
    status, body = http(
        "POST",
        "/compatibility/subjects/verbose-value/versions/latest?verbose=true",
        {"schema": avro([{"name": "name", "type": "int"}]).schema_str},
    )
    assert status == 200 and body["is_compatible"] is False
    assert any("TYPE_MISMATCH" in m for m in body["messages"])
    assert any("oldSchemaVersion: 1" in m for m in body["messages"])


def test_forward_and_full_levels_per_subject(reg: RegistryThread) -> None:
    sr = client(reg)
    subject = "fwd-value"
    with_default = [{"name": "id", "type": "long"}, {"name": "note", "type": "string", "default": ""}]
    sr.register_schema(subject, avro(with_default))
    assert sr.set_compatibility(subject, "FORWARD") == {"compatibility": "FORWARD"}
    assert sr.get_compatibility(subject) == "FORWARD"
    assert sr.get_compatibility() == "BACKWARD"  # the global level is untouched
    # Removing a field the old schema declares with a default: old readers still read new data.
    sr.register_schema(subject, avro([{"name": "id", "type": "long"}]))
    # Removing a field the old schema needs without a default: refused under FORWARD.
    e = refused(lambda: sr.register_schema(subject, avro([{"name": "other", "type": "long", "default": 0}])))
    assert e.error_code == 409
    # Adding a field without a default is FORWARD compatible (old readers ignore it) ...
    sr.register_schema(subject, avro([{"name": "id", "type": "long"}, {"name": "extra", "type": "int"}]))
    # ... but not FULL.
    sr.set_compatibility(subject, "FULL")
    e = refused(
        lambda: sr.register_schema(
            subject,
            avro([{"name": "id", "type": "long"}, {"name": "extra", "type": "int"}, {"name": "x", "type": "int"}]),
        )
    )
    assert e.error_code == 409
    sr.set_compatibility(subject, "NONE")
    sr.register_schema(subject, avro([{"name": "anything", "type": "string"}]))
    assert sr.get_versions(subject) == [1, 2, 3, 4]


def test_transitive_checks_every_version(reg: RegistryThread) -> None:
    sr = client(reg)
    subject = "trans-value"
    sr.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    sr.register_schema(subject, avro([{"name": "a", "type": "int"}]))
    sr.register_schema(subject, avro([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]))
    # Drops the default of b: compatible with v2 (which writes b) but not with v1 (which does not).
    third = avro([{"name": "a", "type": "int"}, {"name": "b", "type": "int"}])
    assert sr.test_compatibility(subject, third, version=2) is True
    assert refused(lambda: sr.register_schema(subject, third)).error_code == 409
    sr.set_compatibility(subject, "BACKWARD")
    assert sr.register_schema(subject, third) > 0


def test_soft_and_hard_deletes_follow_confluents_rules(reg: RegistryThread) -> None:
    sr = client(reg)
    subject = "del-value"
    id1 = sr.register_schema(subject, avro([{"name": "a", "type": "int"}], name="Del"))
    id2 = sr.register_schema(
        subject, avro([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1}], name="Del")
    )
    assert refused(lambda: sr.delete_version(subject, 1, permanent=True)).error_code == 40407
    assert sr.delete_version(subject, 1) == 1
    assert refused(lambda: sr.delete_version(subject, 1)).error_code == 40406
    assert refused(lambda: sr.get_version(subject, 1)).error_code == 40402
    assert sr.get_versions(subject) == [2]
    assert sr.get_schema(id1) is not None  # a soft-deleted schema still reads by id
    assert refused(lambda: sr.delete_subject(subject, permanent=True)).error_code == 40405
    assert sr.delete_version(subject, 1, permanent=True) == 1
    assert refused(lambda: client(reg).get_schema(id1)).error_code == 40403  # no one holds it any more

    assert sr.delete_subject(subject) == [2]
    assert refused(lambda: sr.delete_subject(subject)).error_code == 40404
    assert refused(lambda: sr.get_versions(subject)).error_code == 40401
    assert subject not in sr.get_subjects()
    # Registering again after a soft delete continues the numbering and reuses the schema's id.
    sr = client(reg)  # a fresh client: the old one caches its registrations
    again = sr.register_schema(
        subject, avro([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 1}], name="Del")
    )
    assert again == id2
    assert sr.get_latest_version(subject).version == 3
    assert sr.delete_subject(subject) == [3]
    assert sr.delete_subject(subject, permanent=True) == [2, 3]
    assert refused(lambda: sr.delete_subject(subject)).error_code == 40401
    assert refused(lambda: client(reg).get_schema(id2)).error_code == 40403
    # After a hard delete the subject starts again at version 1 (with a new id: ids are not reused).
    sr = client(reg)
    fresh = sr.register_schema(subject, avro([{"name": "a", "type": "int"}], name="Del"))
    assert sr.get_latest_version(subject).version == 1
    assert fresh not in (id1, id2)


def test_config_endpoints(reg: RegistryThread, http: Any) -> None:
    assert http("GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    status, body = http("GET", "/config/cfg-value")
    assert (status, body["error_code"]) == (404, 40408)
    assert http("GET", "/config/cfg-value?defaultToGlobal=true") == (200, {"compatibilityLevel": "BACKWARD"})
    assert http("PUT", "/config/cfg-value", {"compatibility": "full_transitive"}) == (
        200,
        {"compatibility": "FULL_TRANSITIVE"},
    )
    assert http("GET", "/config/cfg-value") == (200, {"compatibilityLevel": "FULL_TRANSITIVE"})
    status, body = http("PUT", "/config/cfg-value", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    assert http("GET", "/config/cfg-value") == (200, {"compatibilityLevel": "FULL_TRANSITIVE"})
    assert http("DELETE", "/config/cfg-value") == (200, {"compatibilityLevel": "FULL_TRANSITIVE"})
    assert http("GET", "/config/cfg-value")[0] == 404


def test_read_only_mode_refuses_registrations(reg: RegistryThread, http: Any) -> None:
    sr = client(reg)
    assert http("PUT", "/mode/ro-value", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert sr.get_mode("ro-value") == "READONLY"
    e = refused(lambda: sr.register_schema("ro-value", avro([{"name": "a", "type": "int"}])))
    assert (e.http_status_code, e.error_code) == (422, 42205)
    status, body = http("PUT", "/mode/ro-value", {"mode": "SOMETIMES"})
    assert (status, body["error_code"]) == (422, 42204)
    assert http("DELETE", "/mode/ro-value") == (200, {"mode": "READONLY"})
    assert sr.register_schema("ro-value", avro([{"name": "a", "type": "int"}])) > 0
    assert http("GET", "/mode") == (200, {"mode": "READWRITE"})


def test_import_mode_keeps_given_ids_and_versions(reg: RegistryThread, http: Any) -> None:
    subject = "imported-value"
    record = avro([{"name": "i", "type": "int"}], name="Imported").schema_str
    status, body = http("POST", f"/subjects/{subject}/versions", {"schema": record, "id": 5000, "version": 7})
    assert (status, body["error_code"]) == (422, 42205)  # not in import mode
    assert http("PUT", f"/mode/{subject}", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    assert http("POST", f"/subjects/{subject}/versions", {"schema": record, "id": 5000, "version": 7}) == (
        200,
        {"id": 5000},
    )
    status, body = http("GET", f"/subjects/{subject}/versions/7")
    assert (status, body["id"], body["version"]) == (200, 5000, 7)
    other = avro([{"name": "j", "type": "int"}], name="Imported").schema_str
    status, body = http("POST", f"/subjects/{subject}/versions", {"schema": other, "id": 5000, "version": 8})
    assert (status, body["error_code"]) == (422, 42207)  # the id holds another schema
    assert http("DELETE", f"/mode/{subject}") == (200, {"mode": "IMPORT"})
    # Ids allocated afterwards continue above the imported one.
    assert client(reg).register_schema("after-import-value", avro([{"name": "k", "type": "int"}])) == 5001


def test_references_to_other_subjects(reg: RegistryThread, http: Any) -> None:
    address = {"type": "record", "name": "Address", "namespace": "ex", "fields": [{"name": "city", "type": "string"}]}
    person = {"type": "record", "name": "Person", "namespace": "ex", "fields": [{"name": "home", "type": "ex.Address"}]}
    assert http("POST", "/subjects/address-value/versions", {"schema": json.dumps(address)})[0] == 200
    status, body = http("POST", "/subjects/person-value/versions", {"schema": json.dumps(person)})
    assert (status, body["error_code"]) == (422, 42201)  # ex.Address is unknown without the reference
    refs = [{"name": "ex.Address", "subject": "address-value", "version": 1}]
    status, body = http("POST", "/subjects/person-value/versions", {"schema": json.dumps(person), "references": refs})
    assert status == 200
    person_id = body["id"]
    assert http("GET", f"/schemas/ids/{person_id}")[1]["references"] == refs
    assert http("GET", "/subjects/address-value/versions/1/referencedby") == (200, [person_id])
    status, body = http("DELETE", "/subjects/address-value/versions/1")
    assert (status, body["error_code"]) == (422, 42206)  # still referenced
    # The client's Avro deserializer fetches the writer's schema and the one it references.
    named: dict[str, Any] = {}
    fastavro.parse_schema(address, named_schemas=named)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(person, named_schemas=named), {"home": {"city": "Paris"}})
    value = wire.encode(person_id, body.getvalue())
    decoded = AvroDeserializer(client(reg))(value, SerializationContext("person", MessageField.VALUE))
    assert decoded == {"home": {"city": "Paris"}}
