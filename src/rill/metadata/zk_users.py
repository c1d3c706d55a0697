"""Users' SCRAM credentials in ZooKeeper, as Kafka keeps them: ``/config/users/<user>`` holds
``{"version": 1, "config": {"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=N"}}`` (beside
any other config of the user), and each change is announced by a sequential
``/config/changes/config_change_`` znode ``{"version": 2, "entity_path": "users/<user>"}``.

Every broker follows the users with watches (the user list, then each user's znode), so a credential written
through any broker is in effect on all of them at once; a write returns once this broker's image shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.errors import ErrorCode, KafkaError
from rill.metadata import zk_layout as zl
from rill.metadata.user_credentials import CredentialChanges, UserCredentials
from rill.metadata.zk_tx import after_lost_race, committed
from rill.metadata.zk_watches import lasting_children_watch
from rill.security.scram import SCRAM_MECHANISMS, ScramCredential

USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
NOTICE_EXPIRY_S = 15 * 60


def user_path(user: str) -> str:
    return f"{USERS}/{user}"


class ZkUserCredentials:
    def __init__(self, zk: KazooClient, on_loop: Callable[[Callable[[], None]], None]) -> None:
        self._zk = zk
        self._on_loop = on_loop  # runs a function on the event loop (watch callbacks come on kazoo threads)
        self.credentials = UserCredentials()
        self._watched: set[str] = set()

    def start(self) -> None:
        """Make the parents and watch the users (blocking: run in a thread)."""
        self._zk.ensure_path(USERS)
        self._zk.ensure_path(CONFIG_CHANGES)
        lasting_children_watch(self._zk, USERS, self._on_users)

    def _on_users(self, users: list[str]) -> bool:
        for user in users:
            if user not in self._watched:
                self._watched.add(user)
                self._zk.DataWatch(user_path(user), self._watcher(user))
        return True

    def _watcher(self, user: str) -> Callable[..., bool]:
        def on_data(data: bytes | None, *_: Any) -> bool:
            stored = zl.decode_configs(data) if data else {}
            self._on_loop(lambda: self.credentials.set_user(user, stored))
            if data is None:
                self._watched.discard(user)
                return False
            return True

        return on_data

    async def alter(self, changes: CredentialChanges, timeout_s: float = 30.0) -> None:
        def write() -> None:
            # Every user's credentials and their change notices in one transaction, each write conditional on the
            # version read (read again when another broker changed the user meanwhile: nothing is lost).
            for attempt in itertools.count(1):
                tx = self._zk.transaction()
                for user, mechanisms in changes.items():
                    path = user_path(user)
                    try:
                        data, stat = self._zk.get(path)
                        configs, version = zl.decode_configs(data), stat.version
                    except NoNodeError:
                        configs, version = {}, -1
                    for mechanism, cred in mechanisms.items():
                        if cred is None:
                            configs.pop(mechanism, None)
                        else:
                            configs[mechanism] = cred.to_string()
                    if version < 0:
                        tx.create(path, zl.encode_configs(configs))
                    else:
                        tx.set_data(path, zl.encode_configs(configs), version=version)
                    notice = json.dumps({"version": 2, "entity_path": f"users/{user}"}).encode()
                    tx.create(f"{CONFIG_CHANGES}/config_change_", notice, sequence=True)
                if committed(tx.commit()):
                    break
                after_lost_race(self._zk, attempt, (USERS, CONFIG_CHANGES))
            self._purge_old_notices()

        await asyncio.to_thread(write)
        deadline = time.monotonic() + timeout_s
        while not self._shows(changes):
            if time.monotonic() > deadline:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT, "the SCRAM credentials were written, but not yet in effect"
                )
            await asyncio.sleep(0.02)

    def _purge_old_notices(self) -> None:
        """Delete change notices older than Kafka's 15 minutes (every broker has followed them by then)."""
        cutoff_ms = (time.time() - NOTICE_EXPIRY_S) * 1000
        for child in self._zk.get_children(CONFIG_CHANGES):
            path = f"{CONFIG_CHANGES}/{child}"
            stat = self._zk.exists(path)
            if stat is not None and stat.ctime < cutoff_ms:
                with contextlib.suppress(NoNodeError):
                    self._zk.delete(path)

    def _shows(self, changes: CredentialChanges) -> bool:
        return all(
            self.credentials.get(user, mechanism) == cred
            for user, mechanisms in changes.items()
            for mechanism, cred in mechanisms.items()
            if mechanism in SCRAM_MECHANISMS
        )

    def of(self, user: str) -> Mapping[str, ScramCredential]:
        return self.credentials.of(user)
