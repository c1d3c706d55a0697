"""The pieces of authentication on their own: principals of certificate subjects, JAAS text, SCRAM credentials
and exchanges (against scramp's client), PLAIN, and the listener and security configs."""

from __future__ import annotations

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.config import BrokerConfig, ConfigError
from rill.security.jaas import parse_jaas_config
from rill.security.listener_configs import BrokerSecurity, inter_broker_security
from rill.security.principal import ANONYMOUS, KafkaPrincipal, principal_from_certificate, subject_dn
from rill.security.sasl_server import PlainSaslServer, SaslAuthenticationError, ScramSaslServer
from rill.security.scram import ScramCredential, credential_from_password

_CRED = {m: credential_from_password(m, "pw") for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="a";'


def test_subject_dn_is_rfc2253_most_specific_first() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc."),), (("organizationalUnitName", "eng"),),
               (("commonName", "alice"),))  # fmt: skip
    assert subject_dn(subject) == "CN=alice,OU=eng,O=Acme\\, Inc.,C=US"
    assert str(principal_from_certificate({"subject": subject})) == "User:CN=alice,OU=eng,O=Acme\\, Inc.,C=US"
    assert subject_dn(((("commonName", "a"), ("userId", "7")),)) == "CN=a+UID=7"
    assert subject_dn(((("commonName", " x "),),)) == "CN=\\ x\\ "
    assert subject_dn(((("commonName", "#x"),),)) == "CN=\\#x"
    assert principal_from_certificate(None) is ANONYMOUS
    assert KafkaPrincipal.parse("User:CN=a,O=b") == KafkaPrincipal("User", "CN=a,O=b")


def test_jaas_text() -> None:
    (module,) = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a\\"b" '
        'user_admin="x" user_bob=plain;'
    )
    assert module.flag == "required" and module.options["password"] == 'a"b'
    assert module.users == {"admin": "x", "bob": "plain"}
    two = parse_jaas_config(f"{PLAIN} org.apache.kafka.common.security.scram.ScramLoginModule optional;")
    assert [m.flag for m in two] == ["required", "optional"]
    for bad in ("", 'Module required user_a="b"', "Module maybe;", "Module required key;"):
        with pytest.raises(ValueError):
            parse_jaas_config(bad)


def test_scram_credential_string_and_exchange_with_scramps_client() -> None:
    cred = credential_from_password("SCRAM-SHA-512", "pw", 4096)
    assert ScramCredential.from_string(cred.to_string()) == cred
    for password, ok in (("pw", True), ("wrong", False)):
        server = ScramSaslServer("SCRAM-SHA-512", lambda u, m: cred if u == "bob" else None)
        client = scramp.ScramClient(["SCRAM-SHA-512"], "bob", password)
        first = server.evaluate(client.get_client_first().encode())
        client.set_server_first(first.decode())
        if not ok:
            with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
                server.evaluate(client.get_client_final().encode())
            continue
        final = server.evaluate(client.get_client_final().encode())
        client.set_server_final(final.decode())
        assert server.complete and server.authorization_id == "bob"
    unknown = ScramSaslServer("SCRAM-SHA-256", lambda u, m: None)
    with pytest.raises(SaslAuthenticationError):
        unknown.evaluate(scramp.ScramClient(["SCRAM-SHA-256"], "eve", "x").get_client_first().encode())
    with pytest.raises(SaslAuthenticationError):
        ScramSaslServer("SCRAM-SHA-256", lambda u, m: None).evaluate(b"\xff\xfe garbage")


def test_plain() -> None:
    server = PlainSaslServer({"alice": "a"})
    assert server.evaluate(b"\0alice\0a") == b"" and server.authorization_id == "alice"
    for token in (b"\0alice\0b", b"\0bob\0a", b"alice\0a", b"other\0alice\0a", b"\0alice\0", b"\xff\0a\0b"):
        with pytest.raises(SaslAuthenticationError):
            PlainSaslServer({"alice": "a"}).evaluate(token)


def _config(**props: str) -> BrokerConfig:
    return BrokerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


def test_listener_configs() -> None:
    config = BrokerConfig.from_properties({
        "listeners": "CLIENTS://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENTS:SASL_PLAINTEXT,REPLICATION:SASL_PLAINTEXT",
        "inter.broker.listener.name": "REPLICATION",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.clients.sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
        "listener.name.clients.plain.sasl.jaas.config": PLAIN,
        "listener.name.replication.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="b" password="p" user_b="p";',
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    })  # fmt: skip
    assert config.unknown == ()
    security = BrokerSecurity(config)
    assert security.listener("CLIENTS").mechanisms == ("SCRAM-SHA-256", "PLAIN")
    assert security.listener("CLIENTS").plain_users == {"alice": "a"}
    assert security.listener("REPLICATION").plain_users == {"b": "p"}
    inter = inter_broker_security(config)
    assert (inter.listener_name, inter.mechanism, inter.username, inter.password) == ("REPLICATION", "PLAIN", "b", "p")
    assert config.non_default()["listener.name.clients.plain.sasl.jaas.config"] == "[hidden]"


@pytest.mark.parametrize(
    ("props", "why"),
    [
        ({"listeners": "FOO://127.0.0.1:0"}, "no security protocol"),
        ({"inter.broker.listener.name": "X", "security.inter.broker.protocol": "PLAINTEXT"}, "Only one of"),
        ({"inter.broker.listener.name": "NOPE"}, "advertised.listeners"),
        ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
        ({"listener.name.plaintext.sasl.jaas.config": "not jaas"}, "jaas"),
    ],
)
def test_bad_security_configs(props: dict[str, str], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        BrokerConfig.from_properties(props)


def test_listeners_that_cannot_be_set_up() -> None:
    with pytest.raises(ConfigError, match="names none Rill serves"):
        BrokerSecurity(_config(listeners="SASL_PLAINTEXT://127.0.0.1:0"))  # the default mechanism is GSSAPI
    with pytest.raises(ConfigError, match="needs a key store"):
        BrokerSecurity(_config(listeners="SSL://127.0.0.1:0"))


def test_ssl_principal_mapping_rules() -> None:
    from rill.security.ssl_principal_mapper import NoMatchingRule, SslPrincipalMapper

    mapper = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/ , RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,"
        "RULE:^cn=(.*?),dc=(.*?)$/$1\\/$2$9/U, DEFAULT"
    )
    assert mapper.name("CN=kafka-1,OU=ServiceUsers,O=Org,C=US") == "kafka-1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun,C=US") == "duke@javasoft"
    assert mapper.name("cn=duke,dc=sun") == "DUKE/SUN$9"  # an escaped slash, a group that does not exist
    assert mapper.name("O=Nobody") == "O=Nobody"
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("RULE:^CN=x$/y/").name("CN=z")
    for bad in ("RULE:^CN=x$", "RULE:(/x/", "SOMETHING", "DEFAULT DEFAULT"):
        with pytest.raises(ValueError):
            SslPrincipalMapper(bad)
    with pytest.raises(ConfigError, match=r"ssl\.principal\.mapping\.rules"):
        BrokerConfig.from_properties({"ssl.principal.mapping.rules": "RULE:broken"})


@settings(max_examples=300, deadline=None)
@given(
    first=st.one_of(st.binary(max_size=200), st.text(max_size=80).map(lambda t: ("n,," + t).encode())),
    final=st.one_of(st.binary(max_size=200), st.text(max_size=120).map(str.encode)),
    mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
)
def test_any_scram_tokens_fail_cleanly(first: bytes, final: bytes, mechanism: str) -> None:
    """Whatever a client sends, the exchange either goes on or fails with SaslAuthenticationError."""
    cred = _CRED[mechanism]
    server = ScramSaslServer(mechanism, lambda u, m: cred)
    try:
        server.evaluate(first)
        server.evaluate(final)
    except SaslAuthenticationError:
        return
    assert not server.complete  # random bytes never prove a password


@settings(max_examples=300, deadline=None)
@given(token=st.binary(max_size=100))
def test_any_plain_token_fails_cleanly(token: bytes) -> None:
    server = PlainSaslServer({"alice": "a"})
    try:
        server.evaluate(token)
    except SaslAuthenticationError:
        return
    assert token == b"\0alice\0a" or token == b"alice\0alice\0a"
