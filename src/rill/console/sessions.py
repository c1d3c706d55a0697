"""Who uses the console, and as which Kafka identity.

Two modes. With a service identity (``--command-config``, or none on a plaintext cluster) everyone shares it,
and changes are allowed only with ``--allow-writes``. With ``--login`` each person signs in with their SASL
user and password (PLAIN or SCRAM, over the listener's TLS when it has one); the console then connects as
them, so the cluster's ACLs decide what each person sees and may change. Sessions live in memory (a random
token in an HTTP-only, same-site cookie); every form carries the session's CSRF token.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from rill.console.cluster import ConsoleCluster

SESSION_COOKIE = "rill_console"
SESSION_TTL_S = 8 * 3600.0
PENDING_TTL_S = 600.0  # a confirmation page left open longer asks for the secret again
MAX_PENDING = 16  # confirmations with a secret waiting at once, per session


@dataclass
class Session:
    user: str
    props: dict[str, Any]  # Kafka client properties of this identity (Java names, as --command-config)
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    sid: str = field(default_factory=lambda: secrets.token_hex(16))  # names what is kept for this session only
    created: float = field(default_factory=time.monotonic)
    cluster: ConsoleCluster | None = None
    # secrets of changes waiting for their confirmation (a password), kept here rather than sent back to the
    # browser in the confirmation page: reference -> (when, fields)
    pending_secrets: dict[str, tuple[float, dict[str, str]]] = field(default_factory=dict)

    def stash_secrets(self, secrets_: dict[str, str]) -> str:
        """Keep ``secrets_`` for the confirmation of one change; returns the reference its page carries."""
        now = time.monotonic()
        for ref in [r for r, (t, _) in self.pending_secrets.items() if now - t > PENDING_TTL_S]:
            del self.pending_secrets[ref]
        while len(self.pending_secrets) >= MAX_PENDING:
            del self.pending_secrets[next(iter(self.pending_secrets))]
        ref = secrets.token_urlsafe(16)
        self.pending_secrets[ref] = (now, dict(secrets_))
        return ref

    def take_secrets(self, ref: str) -> dict[str, str]:
        """The secrets kept under ``ref`` (once: the reference is spent), or nothing when unknown or expired."""
        found = self.pending_secrets.pop(ref, None)
        if found is None or time.monotonic() - found[0] > PENDING_TTL_S:
            return {}
        return found[1]


    def close(self) -> None:
        """Disconnect this identity's client, if it has one."""
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            cluster.close()


class Sessions:
    def __init__(self) -> None:
        self._by_token: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, session: Session) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._expire()
            self._by_token[token] = session
        return token

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        with self._lock:
            found = self._by_token.get(token)
            if found is not None and time.monotonic() - found.created > SESSION_TTL_S:
                del self._by_token[token]
                return None
            return found

    def close(self, token: str | None) -> Session | None:
        with self._lock:
            return self._by_token.pop(token or "", None)

    def _expire(self) -> None:
        now = time.monotonic()
        for token in [t for t, s in self._by_token.items() if now - s.created > SESSION_TTL_S]:
            del self._by_token[token]
