"""The SCRAM credentials of users, as the metadata stores keep them: user -> mechanism -> credential.

A change maps users to their mechanisms' new credentials, ``None`` deleting one. The stores keep them in their
own way (the embedded journal's ``user_scram`` change and snapshot field; ZooKeeper's ``/config/users/<user>``
with Kafka's string form, ``rill.security.scram``), and read them here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rill.security.scram import SCRAM_MECHANISMS, ScramCredential

log = logging.getLogger(__name__)

CredentialChanges = Mapping[str, Mapping[str, ScramCredential | None]]
"""user -> mechanism -> new credential (None: delete it)."""


class UserCredentials:
    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def of(self, user: str) -> Mapping[str, ScramCredential]:
        return self._users.get(user, {})

    def users(self) -> list[str]:
        return sorted(u for u, creds in self._users.items() if creds)

    def apply(self, changes: CredentialChanges) -> None:
        for user, mechanisms in changes.items():
            creds = dict(self._users.get(user, {}))
            for mechanism, cred in mechanisms.items():
                if cred is None:
                    creds.pop(mechanism, None)
                else:
                    creds[mechanism] = cred
            if creds:
                self._users[user] = creds
            else:
                self._users.pop(user, None)

    def set_user(self, user: str, stored: Mapping[str, str]) -> None:
        """A user's credentials from their stored strings (other config keys of the user are not ours)."""
        self._users.pop(user, None)
        self.apply({user: {m: _parse(user, m, v) for m, v in stored.items() if m in SCRAM_MECHANISMS}})

    def to_json(self) -> dict[str, dict[str, str]]:
        return {u: {m: c.to_string() for m, c in creds.items()} for u, creds in sorted(self._users.items())}

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, str]]) -> UserCredentials:
        out = cls()
        for user, stored in data.items():
            out.set_user(user, stored)
        return out


def changes_to_json(changes: CredentialChanges) -> dict[str, dict[str, str | None]]:
    return {u: {m: None if c is None else c.to_string() for m, c in ms.items()} for u, ms in changes.items()}


def changes_from_json(data: Mapping[str, Mapping[str, str | None]]) -> dict[str, dict[str, ScramCredential | None]]:
    return {u: {m: None if v is None else _parse(u, m, v) for m, v in ms.items()} for u, ms in data.items()}


def _parse(user: str, mechanism: str, text: str | None) -> ScramCredential | None:
    if text is None:
        return None
    try:
        return ScramCredential.from_string(text)
    except ValueError as e:
        log.warning("User %s: stored %s credential set aside: %s", user, mechanism, e)
        return None
