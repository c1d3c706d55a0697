"""ACLs with real clients over SASL: confluent-kafka's AdminClient creates, describes and deletes them, and its
producers and consumers, authenticated with PLAIN or SCRAM, are allowed or refused as Kafka's authorizer would;
a refused write leaves the log as it was."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from tests.integration.security._clients import add_scram_user, librdkafka_conf
from tests.integration.security.test_acl_walk import sasl_wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(120)

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" '
    'user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret" user_carol="carol-secret";'
)


def _broker_configs(**extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        **extra,
    }


@pytest.fixture
def acl_broker() -> Iterator[rill.testing.TestBroker]:
    with rill.testing.broker(_broker_configs()) as b:
        yield b


def _user(b: rill.testing.TestBroker, user: str, **extra: Any) -> dict[str, Any]:
    conf = librdkafka_conf(b.listener_address("SASL_PLAINTEXT"), "SASL_PLAINTEXT", "PLAIN", user, f"{user}-secret")
    return {**conf, **extra}


def _admin(b: rill.testing.TestBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap_servers})


def _allow(principal: str, op: AclOperation, rtype: ResourceType, name: str,
           pattern: ResourcePatternType = ResourcePatternType.LITERAL,
           permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def _create(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=15)


def _topics(admin: AdminClient, *names: str) -> None:
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(timeout=15)


def _produce(conf: dict[str, Any], topic: str, n: int = 5) -> KafkaError | None:
    """Produce ``n`` records; the first delivery error, or None when all were written."""
    errors: list[KafkaError] = []
    producer = confluent_kafka.Producer({**conf, "message.timeout.ms": 8000})
    for i in range(n):
        producer.produce(topic, f"{i}".encode(), on_delivery=lambda err, _m: errors.append(err) if err else None)
    producer.flush(15)
    return errors[0] if errors else None


def _consume(
    conf: dict[str, Any], topic: str, group: str, n: int, timeout: float = 15.0
) -> tuple[int, KafkaError | None]:
    """Read up to ``n`` records with ``group``: (how many, the first error the consumer reported)."""
    consumer = confluent_kafka.Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, error = 0, None
    deadline = time.monotonic() + timeout
    try:
        while got < n and error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    error = msg.error()
            else:
                got += 1
    except KafkaException as e:
        error = e.args[0]
    finally:
        consumer.close()
    return got, error


def _log_size(b: rill.testing.TestBroker, topic: str) -> int:
    return sum(p.stat().st_size for p in (Path(b.overrides["log.dirs"]) / f"{topic}-0").glob("*.log"))


def test_a_user_who_may_read_but_not_write_a_topic(acl_broker: rill.testing.TestBroker) -> None:
    admin = _admin(acl_broker)
    _topics(admin, "orders")
    assert _produce({"bootstrap.servers": acl_broker.bootstrap_servers}, "orders") is None
    _create(admin, _allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "orders"),
            _allow("User:alice", AclOperation.READ, ResourceType.GROUP, "alice-group"))  # fmt: skip
    size = _log_size(acl_broker, "orders")
    err = _produce(_user(acl_broker, "alice"), "orders")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _log_size(acl_broker, "orders") == size  # the refused write left nothing
    got, error = _consume(_user(acl_broker, "alice"), "orders", "alice-group", 5)
    assert (got, error) == (5, None)


def test_a_prefixed_acl_covers_a_teams_topics(acl_broker: rill.testing.TestBroker) -> None:
    admin = _admin(acl_broker)
    _topics(admin, "team-a.events", "team-a.audit", "team-b.events")
    _create(admin, _allow("User:bob", AclOperation.WRITE, ResourceType.TOPIC, "team-a.", ResourcePatternType.PREFIXED))
    bob = _user(acl_broker, "bob")
    assert _produce(bob, "team-a.events") is None
    assert _produce(bob, "team-a.audit") is None
    err = _produce(bob, "team-b.events")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _log_size(acl_broker, "team-b.events") == 0
    # WRITE implies DESCRIBE: bob's metadata shows his team's topics and nothing else
    listed = AdminClient(bob).list_topics(timeout=10).topics
    assert set(listed) == {"team-a.events", "team-a.audit"}


def test_a_consumer_needs_read_on_its_group(acl_broker: rill.testing.TestBroker) -> None:
    admin = _admin(acl_broker)
    _topics(admin, "clicks")
    assert _produce({"bootstrap.servers": acl_broker.bootstrap_servers}, "clicks") is None
    _create(admin, _allow("User:carol", AclOperation.READ, ResourceType.TOPIC, "clicks"))
    got, error = _consume(_user(acl_broker, "carol"), "clicks", "carol-group", 5, timeout=10)
    assert got == 0 and error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    _create(admin, _allow("User:carol", AclOperation.READ, ResourceType.GROUP, "carol-", ResourcePatternType.PREFIXED))
    assert _consume(_user(acl_broker, "carol"), "clicks", "carol-group", 5) == (5, None)


def test_a_deny_overrides_an_allow(acl_broker: rill.testing.TestBroker) -> None:
    admin = _admin(acl_broker)
    _topics(admin, "shared")
    deny = AclPermissionType.DENY
    _create(admin, _allow("User:*", AclOperation.ALL, ResourceType.TOPIC, "*"),
            _allow("User:bob", AclOperation.WRITE, ResourceType.TOPIC, "shared", permission=deny))  # fmt: skip
    assert _produce(_user(acl_broker, "alice"), "shared") is None
    err = _produce(_user(acl_broker, "bob"), "shared")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_super_users_need_no_acl(acl_broker: rill.testing.TestBroker) -> None:
    _topics(_admin(acl_broker), "ops")
    _create(_admin(acl_broker), _allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "ops"))
    admin_conf = _user(acl_broker, "admin")
    assert _produce(admin_conf, "ops") is None
    assert _consume(admin_conf, "ops", "any-group", 5) == (5, None)
    # alice, with only READ, may not create topics nor see the ACLs
    alice_admin = AdminClient(_user(acl_broker, "alice"))
    with pytest.raises(KafkaException) as refused:
        alice_admin.create_topics([NewTopic("alices", 1, 1)])["alices"].result(timeout=15)
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)  # fmt: skip
    assert alice_admin.describe_acls(any_acl).result(timeout=15) == []  # librdkafka raises no error here
    w = sasl_wire(acl_broker.listener_address("SASL_PLAINTEXT"), "alice", "alice-secret")
    body = {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1}
    described = w.call(ApiKey.DESCRIBE_ACLS, 3, body)
    assert (described["error_code"], described["resources"]) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])


def test_scram_user_with_acls_and_acls_kept_across_a_restart(acl_broker: rill.testing.TestBroker) -> None:
    admin = _admin(acl_broker)
    _topics(admin, "payments")
    add_scram_user(acl_broker.bootstrap_servers, "dave", "dave-secret")
    _create(admin, _allow("User:dave", AclOperation.WRITE, ResourceType.TOPIC, "pay", ResourcePatternType.PREFIXED))
    acl_broker.restart()
    dave = librdkafka_conf(acl_broker.listener_address("SASL_PLAINTEXT"), "SASL_PLAINTEXT", "SCRAM-SHA-256", "dave",
                           "dave-secret")  # fmt: skip
    assert _produce(dave, "payments") is None
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)  # fmt: skip
    admin = _admin(acl_broker)
    listed = admin.describe_acls(any_acl).result(timeout=15)
    assert [(b.name, b.resource_pattern_type, b.principal) for b in listed] == [
        ("pay", ResourcePatternType.PREFIXED, "User:dave")
    ]
    deleted = admin.delete_acls([any_acl])[any_acl].result(timeout=15)
    assert len(deleted) == 1
    err = _produce(dave, "payments")
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_allow_everyone_if_no_acl_found() -> None:
    with rill.testing.broker(_broker_configs(**{"allow.everyone.if.no.acl.found": "true"})) as b:
        _topics(_admin(b), "open", "guarded")
        _create(_admin(b), _allow("User:bob", AclOperation.WRITE, ResourceType.TOPIC, "guarded"))
        assert _produce(_user(b, "alice"), "open") is None  # no ACL on it: everyone
        err = _produce(_user(b, "alice"), "guarded")  # an ACL exists: only what it allows
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(rill_broker: rill.testing.TestBroker) -> None:
    admin = AdminClient({"bootstrap.servers": rill_broker.bootstrap_servers})
    with pytest.raises(KafkaException) as refused:
        _create(admin, _allow("User:alice", AclOperation.READ, ResourceType.TOPIC, "t"))
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
