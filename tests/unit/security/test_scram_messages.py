"""The SCRAM exchange of RFC 5802 on both sides: RFC 7677's example, scramp's client and server against Rill's,
any non-empty salt (Kafka takes any), stored iteration counts checked at login, and malformed messages refused."""

from __future__ import annotations

import base64

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.security import scram_messages as sm
from rill.security.sasl_server import SaslAuthenticationError, ScramSaslServer
from rill.security.scram import ScramCredential, credential_from_salted_password

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _credential(mechanism: str, password: str, salt: bytes, iterations: int = 4096) -> ScramCredential:
    return credential_from_salted_password(
        mechanism, salt, sm.salted_password(mechanism, password, salt, iterations), iterations
    )


def _server(mechanism: str, credential: ScramCredential | None, user: str = "user") -> ScramSaslServer:
    return ScramSaslServer(mechanism, lambda u, m: credential if u == user and m == mechanism else None)


def _exchange(server: ScramSaslServer, client: sm.ScramClient) -> None:
    client.verify(server.evaluate(client.final(server.evaluate(client.first().encode()).decode()).encode()).decode())


def test_rfc_7677_example(monkeypatch: pytest.MonkeyPatch) -> None:
    client_nonce, server_nonce = "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    monkeypatch.setattr(sm, "new_nonce", lambda: server_nonce)
    server = _server("SCRAM-SHA-256", _credential("SCRAM-SHA-256", "pencil", salt))
    client = sm.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=client_nonce)
    assert client.first() == "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    first = server.evaluate(client.first().encode()).decode()
    assert first == f"r={client_nonce}{server_nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final(first)
    assert final == (f"c=biws,r={client_nonce}{server_nonce},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server.evaluate(final.encode()) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    assert server.complete and server.authorization_id == "user"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_scramps_client_and_server_agree_with_rills(mechanism: str) -> None:
    salt = b"a salt of 16 by"
    credential = _credential(mechanism, "pw", salt, 4096)
    # scramp's client against Rill's server
    server = _server(mechanism, credential, "bob")
    client = scramp.ScramClient([mechanism], "bob", "pw")
    client.set_server_first(server.evaluate(client.get_client_first().encode()).decode())
    client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
    assert server.complete
    # Rill's client against scramp's server
    auth = scramp.ScramMechanism(mechanism).make_auth_info("pw", 4096, salt=salt)
    assert auth == (salt, credential.stored_key, credential.server_key, 4096)
    theirs = scramp.ScramMechanism(mechanism).make_server(lambda user: auth)
    ours = sm.ScramClient(mechanism, "bob", "pw")
    theirs.set_client_first(ours.first())
    theirs.set_client_final(ours.final(theirs.get_server_first()))
    ours.verify(theirs.get_server_final())


@settings(max_examples=25, deadline=None)
@given(
    mechanism=st.sampled_from(MECHANISMS),
    user=st.text(min_size=1, max_size=20).filter(lambda u: "\0" not in u),
    password=st.text(max_size=20),
    salt=st.binary(min_size=1, max_size=40),
)
def test_any_non_empty_salt_any_user_and_password_log_in(mechanism: str, user: str, password: str, salt: bytes) -> None:
    """Kafka takes any non-empty salt (scramp refuses those under 12 bytes); user names may hold , and =."""
    credential = _credential(mechanism, password, salt)
    server = _server(mechanism, credential, user)
    _exchange(server, sm.ScramClient(mechanism, user, password))
    assert server.complete and server.authorization_id == user
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        _exchange(_server(mechanism, credential, user), sm.ScramClient(mechanism, user, password + "x"))


def test_a_stored_credential_with_too_few_iterations_is_refused_at_login() -> None:
    """As Kafka's ScramSaslServer: a stored count under 4096 (written by an older tool, or by hand into
    ZooKeeper) fails the login at the first round, however right the password."""
    credential = _credential("SCRAM-SHA-256", "pw", b"salt-salt-salt", 1000)
    server = _server("SCRAM-SHA-256", credential)
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        server.evaluate(sm.ScramClient("SCRAM-SHA-256", "user", "pw").first().encode())
    fine = _server("SCRAM-SHA-256", _credential("SCRAM-SHA-256", "pw", b"salt-salt-salt", 4096))
    _exchange(fine, sm.ScramClient("SCRAM-SHA-256", "user", "pw"))


def test_an_unknown_user_a_foreign_authzid_and_malformed_messages_fail() -> None:
    credential = _credential("SCRAM-SHA-256", "pw", b"salt")
    for first in (b"n,,n=eve,r=abc", b"p=tls-unique,,n=user,r=abc", b"n,,m=x,n=user,r=abc", b"n,,n=us=er,r=abc",
                  b"n,,r=abc", b"\xff", b"", b"n,,n=user,r="):  # fmt: skip
        with pytest.raises(SaslAuthenticationError):
            _server("SCRAM-SHA-256", credential).evaluate(first)
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        _server("SCRAM-SHA-256", credential).evaluate(b"n,a=admin,n=user,r=abc")
    server = _server("SCRAM-SHA-256", credential)
    nonce = server.evaluate(b"n,,n=user,r=abc").decode().split(",")[0][2:]
    for final in (f"c=biws,r={nonce}", "c=biws,r=other,p=AAAA", f"c=eSws,r={nonce},p=AAAA", "c=biws,p=AAAA"):
        with pytest.raises(SaslAuthenticationError):
            _server("SCRAM-SHA-256", credential).evaluate(final.encode())  # a final message without a first
        s = _server("SCRAM-SHA-256", credential)
        s.evaluate(b"n,,n=user,r=abc")
        with pytest.raises(SaslAuthenticationError):
            s.evaluate(final.encode())


@settings(max_examples=200, deadline=None)
@given(first=st.binary(max_size=60), final=st.binary(max_size=80))
def test_no_message_breaks_the_server(first: bytes, final: bytes) -> None:
    server = _server("SCRAM-SHA-512", _credential("SCRAM-SHA-512", "pw", b"s"))
    try:
        server.evaluate(first)
        server.evaluate(final)
    except SaslAuthenticationError:
        pass
    assert not server.complete


def test_the_client_refuses_a_weakened_or_forged_server() -> None:
    client = sm.ScramClient("SCRAM-SHA-256", "user", "pw", nonce="abc")
    client.first()
    for server_first in (
        "r=abcdef,s=c2FsdA==,i=1000",
        "r=abcdef,s=c2FsdA==,i=99999999",
        "r=xyz,s=c2FsdA==,i=4096",
        "r=abc,s=c2FsdA==,i=4096",
        "r=abcdef,s=,i=4096",
        "r=abcdef,s=!!,i=4096",
        "e=unknown-user",
    ):
        with pytest.raises(sm.ScramError):
            client.final(server_first)
    client.final("r=abcdef,s=c2FsdA==,i=4096")
    for server_final in ("v=" + base64.b64encode(b"x" * 32).decode(), "e=invalid-proof", "v=??"):
        with pytest.raises(sm.ScramError):
            client.verify(server_final)
