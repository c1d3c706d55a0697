"""A throwaway certificate authority made with the ``openssl`` command at test time (no key is kept in the
repository): a CA, a broker certificate for 127.0.0.1 and localhost, a client certificate."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate (PEM): the trust store
    server: Path  # the broker's certificate chain and key in one PEM file (127.0.0.1 and localhost)
    server_cert: Path
    server_key: Path
    client_cert: Path  # a client certificate, subject CN=alice,OU=eng,O=acme
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
             "-days", "2", "-subj", f"/CN={name}", cwd=d)  # fmt: skip


def _signed(d: Path, name: str, subject: str, ext: str | None, digest: str = "sha256") -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=d)  # fmt: skip
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", f"-{digest}"]  # fmt: skip
    if ext:
        (d / f"{name}.ext").write_text(ext)
        args += ["-extfile", f"{name}.ext"]
    _openssl(*args, cwd=d)


def make_pki(d: Path) -> Pki:
    _ca(d, "ca")
    _ca(d, "other-ca")
    _signed(d, "server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _signed(d, "client", "/O=acme/OU=eng/CN=alice", None)
    (d / "server-store.pem").write_text((d / "server.pem").read_text() + (d / "server.key").read_text())
    return Pki(d / "ca.pem", d / "server-store.pem", d / "server.pem", d / "server.key", d / "client.pem",
               d / "client.key", d / "other-ca.pem")  # fmt: skip


def sha1_server_store(pki: Pki) -> Path:
    """A broker key store (chain and key in one PEM file) whose certificate the same CA signed with SHA-1."""
    d = pki.ca.parent
    store = d / "server-sha1-store.pem"
    if not store.exists():
        _signed(d, "server-sha1", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\n", digest="sha1")
        store.write_text((d / "server-sha1.pem").read_text() + (d / "server-sha1.key").read_text())
    return store
