"""DescribeUserScramCredentials and AlterUserScramCredentials: Kafka's answers, every alteration checked before
anything is written, credentials kept across a restart, and usable at once for authentication."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from tests.integration.broker._wire import Wire

import rill.testing
from rill.errors import ErrorCode
from rill.protocol import ApiKey

pytestmark = pytest.mark.timeout(60)

SALTED = b"s" * 32  # stands for a salted password: the broker derives the keys from it


def _upsert(
    name: str, mechanism: int = 1, iterations: int = 4096, salt: bytes = b"salt-salt-salt"
) -> dict[str, object]:
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": SALTED}


Results = dict[str, tuple[int, str | None]]


def _alter(w: Wire, upsertions: list[dict[str, object]], deletions: list[dict[str, object]] | None = None) -> Results:
    body = w.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": deletions or [], "upsertions": upsertions})
    return {r["user"]: (r["error_code"], r["error_message"]) for r in body["results"]}


def _describe(w: Wire, users: list[str] | None) -> dict[str, object]:
    names = None if users is None else [{"name": u} for u in users]
    return w.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": names})


def test_refused_alterations_change_nothing(rill_broker: rill.testing.TestBroker) -> None:
    w = Wire(rill_broker.bootstrap_servers)
    results = _alter(w, [
        _upsert("ok"),
        _upsert("few", iterations=1000),
        _upsert("many", iterations=20000),
        _upsert("mech", mechanism=7),
        _upsert(""),
        _upsert("twice"), _upsert("twice"),
        _upsert("nosalt", salt=b""),
    ], [{"name": "ghost", "mechanism": 1}])  # fmt: skip
    assert results["ok"] == (0, None)
    assert results["few"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL and "Too few iterations" in str(results["few"][1])
    assert results["many"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert results["mech"] == (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    assert results[""][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert results["twice"][0] == ErrorCode.DUPLICATE_RESOURCE
    assert results["nosalt"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert results["ghost"][0] == ErrorCode.RESOURCE_NOT_FOUND
    described = _describe(w, None)
    assert [r["user"] for r in described["results"]] == ["ok"]
    # a user with one bad alteration among good ones gets none of them
    results = _alter(w, [_upsert("mixed", 1), _upsert("mixed", 2, iterations=10)])
    assert results["mixed"][0] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    one = _describe(w, ["mixed", "ok", "ok"])
    by_user = {r["user"]: r for r in one["results"]}
    assert by_user["mixed"]["error_code"] == ErrorCode.RESOURCE_NOT_FOUND
    assert by_user["ok"]["error_code"] == ErrorCode.DUPLICATE_RESOURCE


def test_admin_client_describes_alters_and_deletes_and_they_survive_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with rill.testing.broker(data_dir=tmp_path / "b") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        sha256, sha512 = (ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                          ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096))  # fmt: skip
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", sha256, b"pw1"),
            UserScramCredentialUpsertion("alice", sha512, b"pw2"),
            UserScramCredentialUpsertion("bob", sha256, b"pw3"),
        ])  # fmt: skip
        for f in futures.values():
            f.result(timeout=10)
        described = admin.describe_user_scram_credentials(["alice"])["alice"].result(timeout=10)
        infos = {(i.mechanism, i.iterations) for i in described.scram_credential_infos}
        assert infos == {(ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)}
        futures = admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)])
        futures["bob"].result(timeout=10)
        b.restart()
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        everyone = admin.describe_user_scram_credentials().result(timeout=10)
        assert sorted(everyone) == ["alice"]
        assert len(everyone["alice"].scram_credential_infos) == 2


SCRAM_LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    "connection.failed.authentication.delay.ms": "10",
}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_credential_with_a_short_salt_logs_in_with_every_client(mechanism: str) -> None:
    """Kafka takes any non-empty salt: one of 10 bytes (and of 1) set through confluent-kafka's admin client
    lets its user log in with librdkafka, kafka-python and rill.client."""
    from kafka import KafkaProducer

    from rill.client import ClientSecurity, KafkaClient

    kind = ScramMechanism.SCRAM_SHA_256 if mechanism == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512
    with rill.testing.broker(SCRAM_LISTENERS) as b:
        admin = AdminClient({"bootstrap.servers": b.listener_address("PLAINTEXT")})
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", ScramCredentialInfo(kind, 4096), b"alice-secret", b"salt-alice"),
            UserScramCredentialUpsertion("bob", ScramCredentialInfo(kind, 8192), b"bob-secret", b"s"),
        ])  # fmt: skip
        for f in futures.values():
            f.result(timeout=10)
        address = b.listener_address("SASL_PLAINTEXT")
        for user in ("alice", "bob"):
            password = f"{user}-secret"
            conf = {"bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
                    "sasl.username": user, "sasl.password": password}  # fmt: skip
            librdkafka = AdminClient(conf)
            assert librdkafka.list_topics(timeout=10).brokers, user

            producer = KafkaProducer(bootstrap_servers=address, security_protocol="SASL_PLAINTEXT",
                                     sasl_mechanism=mechanism, sasl_plain_username=user,
                                     sasl_plain_password=password, max_block_ms=10_000)  # fmt: skip
            try:
                producer.send(f"short-salt-{user}", b"x").get(timeout=10)
            finally:
                producer.close(0)

            security = ClientSecurity.from_properties({
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                    f'username="{user}" password="{password}";',
            })  # fmt: skip
            with KafkaClient(address, security=security, timeout_s=10) as client:
                assert f"short-salt-{user}" in client.list_topics()
        # a wrong password is still refused
        wrong = {"bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
                 "sasl.username": "alice", "sasl.password": "wrong"}  # fmt: skip
        from tests.integration.security._clients import auth_error

        assert "Authentication failed" in auth_error(wrong)
