"""TLS listeners: the principal of a client certificate (its subject DN, Kafka's default form), ssl.client.auth
required/requested, key stores given as files or as PEM text in the config, TLS versions, and fetches of log data
(sent from files without TLS) going through the TLS transport."""

from __future__ import annotations

import socket
import ssl
import struct
import time

import confluent_kafka
import pytest
from tests.integration.security._clients import librdkafka_conf, round_trip
from tests.integration.security._pki import sha1_server_store
from tests.integration.security.conftest import Pki, tls_configs

import rill.testing
from rill.protocol import ApiKey, decode_response, encode_request

pytestmark = pytest.mark.timeout(120)


def _client_context(pki: Pki, cert: bool = True, ca: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca or str(pki.ca))
    if cert:
        ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return ctx


def _api_versions(address: str, ctx: ssl.SSLContext) -> tuple[ssl.SSLSocket, dict[str, object]]:
    host, port = address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=10)
    sock = ctx.wrap_socket(raw, server_hostname="localhost")
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, 1, "tls-test", {"client_software_name": "t",
                                                                        "client_software_version": "1"}))  # fmt: skip
    size = struct.unpack(">i", _exact(sock, 4))[0]
    return sock, decode_response(ApiKey.API_VERSIONS, 3, _exact(sock, size))[1]


def _exact(sock: ssl.SSLSocket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def _principals(b: rill.testing.TestBroker, listener: str) -> set[str]:
    deadline = time.monotonic() + 5
    while True:
        found = {str(c.info.security.principal) for c in b.broker._server._connections
                 if c.info.listener_name == listener}  # fmt: skip
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_client_certificate_gives_the_principal(pki: Pki) -> None:
    configs = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **tls_configs(pki, "required")}
    with rill.testing.broker(configs) as b:
        sock, body = _api_versions(b.listener_address("SSL"), _client_context(pki))
        assert body["error_code"] == 0
        assert _principals(b, "SSL") == {"User:CN=alice,OU=eng,O=acme"}
        sock.close()
        # required: a client without a certificate is refused in the handshake
        with pytest.raises((ssl.SSLError, ConnectionError, struct.error)):
            _api_versions(b.listener_address("SSL"), _client_context(pki, cert=False))
        # and the broker still serves a client with one
        sock, body = _api_versions(b.listener_address("SSL"), _client_context(pki))
        assert body["error_code"] == 0
        sock.close()


def test_requested_client_auth_without_a_certificate_is_anonymous(pki: Pki) -> None:
    configs = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **tls_configs(pki, "requested")}
    with rill.testing.broker(configs) as b:
        sock, _ = _api_versions(b.listener_address("SSL"), _client_context(pki, cert=False))
        assert _principals(b, "SSL") == {"User:ANONYMOUS"}
        sock.close()


def test_key_store_as_pem_text_and_tls13_only(pki: Pki) -> None:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": pki.server_cert.read_text(),
        "ssl.keystore.key": pki.server_key.read_text(),
        "ssl.enabled.protocols": "TLSv1.3",
    }
    with rill.testing.broker(configs) as b:
        sock, body = _api_versions(b.listener_address("SSL"), _client_context(pki, cert=False))
        assert sock.version() == "TLSv1.3" and body["error_code"] == 0
        sock.close()
        old = _client_context(pki, cert=False)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _api_versions(b.listener_address("SSL"), old)


def test_a_key_store_that_is_not_pem_stops_the_start(pki: Pki, tmp_path) -> None:  # type: ignore[no-untyped-def]
    jks = tmp_path / "server.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 64)
    configs = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(jks)}
    with pytest.raises(Exception, match="not PEM"), rill.testing.broker(configs):
        pass


def test_a_sha1_signed_certificate_is_refused_with_the_setting_that_allows_it(pki: Pki) -> None:
    """Kafka's Java broker takes a certificate its own CA signed with SHA-1; OpenSSL's default security level
    refuses it (CA_MD_TOO_WEAK). The start stops with one line that says so and names the setting that allows
    it; with that setting the broker starts and clients that allow SHA-1 too connect."""
    store = str(sha1_server_store(pki))
    configs = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
               "ssl.keystore.location": store}  # fmt: skip
    refusal = r"SHA-1.*ssl\.cipher\.suites=DEFAULT:@SECLEVEL=0"
    with pytest.raises(Exception, match=refusal) as refused, rill.testing.broker(configs):
        pass
    assert "CA_MD_TOO_WEAK" in str(refused.value)
    with rill.testing.broker({**configs, "ssl.cipher.suites": "DEFAULT:@SECLEVEL=0"}) as b:
        ctx = _client_context(pki, cert=False)
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        sock, body = _api_versions(b.listener_address("SSL"), ctx)
        assert body["error_code"] == 0
        sock.close()
        conf = librdkafka_conf(b.listener_address("SSL"), "SSL", ca=str(pki.ca))
        assert len(round_trip({**conf, "ssl.cipher.suites": "DEFAULT:@SECLEVEL=0"}, "sha1-tls", n=5)) == 5


def test_large_fetches_over_tls(pki: Pki) -> None:
    """Fetch responses carry log data as file regions; over TLS they are read and encrypted, and arrive whole."""
    configs = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **tls_configs(pki)}
    with rill.testing.broker(configs) as b:
        conf = librdkafka_conf(b.listener_address("SSL"), "SSL", ca=str(pki.ca))
        producer = confluent_kafka.Producer({**conf, "linger.ms": 20})
        value = bytes(range(256)) * 400  # 100 KiB, incompressible enough
        for i in range(60):
            producer.produce("big", value, key=str(i).encode())
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer({**conf, "group.id": "big", "auto.offset.reset": "earliest",
                                             "fetch.max.bytes": 8 * 1024 * 1024})  # fmt: skip
        consumer.subscribe(["big"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 60 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                assert msg.value() == value
                got += 1
        consumer.close()
        assert got == 60
        assert len(round_trip(conf, "small-after-big", n=3)) == 3


def test_failed_tls_handshakes_are_counted(pki: Pki) -> None:
    configs = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **tls_configs(pki, "required")}
    with rill.testing.broker(configs) as b:
        host, port = b.listener_address("SSL").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as s:  # plaintext to a TLS port
            s.sendall(encode_request(ApiKey.API_VERSIONS, 3, 1, "t", {"client_software_name": "t",
                                                                      "client_software_version": "1"}))  # fmt: skip
            s.settimeout(5)
            assert s.recv(100) == b""
        with pytest.raises((ssl.SSLError, ConnectionError, struct.error)):  # no client certificate
            _api_versions(b.listener_address("SSL"), _client_context(pki, cert=False))
        deadline = time.monotonic() + 5
        while b.broker._server.tls_handshake_failures.get("SSL", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.broker._server.tls_handshake_failures == {"SSL": 2}
        assert b.broker.services.security.authentications["SSL"] == [0, 2]
        sock, body = _api_versions(b.listener_address("SSL"), _client_context(pki))  # a good client is served
        assert body["error_code"] == 0
        sock.close()
        assert b.broker._server.tls_handshake_failures == {"SSL": 2}


def test_principal_mapping_rules(pki: Pki) -> None:
    configs = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,OPS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,OPS:SSL",
        **tls_configs(pki, "required"),
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=eng,.*$/$1/U,DEFAULT",
        "listener.name.ops.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=ops,.*$/$1/",  # matches no one here
    }
    with rill.testing.broker(configs) as b:
        sock, _ = _api_versions(b.listener_address("SSL"), _client_context(pki))
        assert _principals(b, "SSL") == {"User:ALICE"}
        sock.close()
        with pytest.raises((ssl.SSLError, ConnectionError, struct.error)):
            _api_versions(b.listener_address("OPS"), _client_context(pki))
        assert b.broker._server.tls_handshake_failures.get("OPS") == 1
