"""Client quotas in ZooKeeper, as Kafka 2.x keeps them: ``/config/users/<user>``,
``/config/users/<user>/clients/<client-id>``, ``/config/clients/<client-id>`` (names sanitized, ``<default>`` for
the defaults), each ``{"version": 1, "config": {"producer_byte_rate": "1024", ...}}`` beside any other config of
the entity (a user's SCRAM credentials), and each change announced by a sequential
``/config/changes/config_change_`` znode ``{"version": 2, "entity_path": "users/<user>/clients/<client-id>"}``.

Every broker reads them all at start and then follows the change notices: each new notice naming a user or client
entity has that entity read again, so a quota written through any broker (or by Kafka's tools) is in effect on all
of them within a ZooKeeper round trip. A write returns once this broker's image shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.errors import ErrorCode, KafkaError
from rill.metadata import zk_layout as zl
from rill.metadata.client_quotas import QUOTA_KEYS, ClientQuotas, QuotaChanges, QuotaEntity, format_value
from rill.metadata.zk_tx import after_lost_race, committed
from rill.metadata.zk_watches import lasting_children_watch

log = logging.getLogger(__name__)

CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
NOTICE_PREFIX = "config_change_"

Updates = list[tuple[QuotaEntity, dict[str, str]]]


def _seq(child: str) -> int:
    try:
        return int(child[len(NOTICE_PREFIX) :]) if child.startswith(NOTICE_PREFIX) else -1
    except ValueError:
        return -1


class ZkClientQuotas:
    def __init__(self, zk: KazooClient) -> None:
        self._zk = zk
        self.quotas = ClientQuotas()
        self._last_notice = -1
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._follower: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        for entity, stored in await asyncio.to_thread(self._load_all):
            self.quotas.set_entity(entity, stored)
        self._follower = asyncio.create_task(self._follow(), name="zk-client-quotas")
        await asyncio.to_thread(lasting_children_watch, self._zk, CONFIG_CHANGES, self._on_notices)

    async def close(self) -> None:
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower

    def close_now(self) -> None:
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.cancel()

    def _on_notices(self, _children: list[str]) -> bool:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)
        return self._follower is not None  # False ends the watch once closed

    # -- reading (worker threads) ------------------------------------------------------------------------------

    def _configs(self, path: str) -> dict[str, str]:
        try:
            data, _ = self._zk.get(path)
        except NoNodeError:
            return {}
        return zl.decode_configs(data) if data else {}

    def _children(self, path: str) -> list[str]:
        try:
            return list(self._zk.get_children(path))
        except NoNodeError:
            return []

    def _load_all(self) -> Updates:
        self._zk.ensure_path(CONFIG_CHANGES)
        self._zk.ensure_path(f"{CONFIG}/users")
        self._zk.ensure_path(f"{CONFIG}/clients")
        self._last_notice = max((_seq(c) for c in self._children(CONFIG_CHANGES)), default=-1)
        out: Updates = []
        for user in self._children(f"{CONFIG}/users"):
            out.append((QuotaEntity(user, None), self._configs(f"{CONFIG}/users/{user}")))
            for client in self._children(f"{CONFIG}/users/{user}/clients"):
                entity = QuotaEntity(user, client)
                out.append((entity, self._configs(f"{CONFIG}/{entity.path}")))
        for client in self._children(f"{CONFIG}/clients"):
            out.append((QuotaEntity(None, client), self._configs(f"{CONFIG}/clients/{client}")))
        return out

    def _read_new_notices(self) -> Updates:
        out: Updates = []
        for child in sorted(self._children(CONFIG_CHANGES), key=_seq):
            seq = _seq(child)
            if seq <= self._last_notice:
                continue
            try:
                data, _ = self._zk.get(f"{CONFIG_CHANGES}/{child}")
                path = str(json.loads(data).get("entity_path", ""))
                entity = QuotaEntity.from_path(path)
            except NoNodeError:
                continue
            except ValueError:  # a notice of another entity type (topics, brokers), or not JSON
                self._last_notice = seq
                continue
            out.append((entity, self._configs(f"{CONFIG}/{entity.path}")))
            self._last_notice = seq
        return out

    async def _follow(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                updates = await asyncio.to_thread(self._read_new_notices)
            except Exception:
                log.warning("reading client quota changes from ZooKeeper failed; trying again", exc_info=True)
                await asyncio.sleep(1.0)
                self._wake.set()
                continue
            for entity, stored in updates:
                self.quotas.set_entity(entity, stored)

    # -- writing -----------------------------------------------------------------------------------------------

    def _write(self, changes: QuotaChanges) -> None:
        """Every entity's new quotas and their change notices in one transaction, each write conditional on the
        version read (read again when another writer was first): a change is made whole or not at all, and never
        without the notices the brokers follow."""
        for attempt in itertools.count(1):
            tx = self._zk.transaction()
            for entity, ops in changes.items():
                path = f"{CONFIG}/{entity.path}"
                try:
                    data, stat = self._zk.get(path)
                    configs, version = (zl.decode_configs(data) if data else {}), stat.version
                except NoNodeError:
                    configs, version = {}, -1
                for key, value in ops.items():
                    if value is None:
                        configs.pop(key, None)
                    else:
                        configs[key] = format_value(key, value)
                encoded = zl.encode_configs(configs)
                if version < 0:
                    self._zk.ensure_path(path.rsplit("/", 1)[0])
                    tx.create(path, encoded)
                else:
                    tx.set_data(path, encoded, version=version)
                notice = json.dumps({"version": 2, "entity_path": entity.path}).encode()
                tx.create(f"{CONFIG_CHANGES}/{NOTICE_PREFIX}", notice, sequence=True)
            if committed(tx.commit()):
                return
            after_lost_race(self._zk, attempt, (CONFIG_CHANGES,))

    async def alter(self, changes: QuotaChanges, timeout_s: float = 30.0) -> None:
        await asyncio.to_thread(self._write, changes)
        deadline = time.monotonic() + timeout_s
        while not self._shows(changes):
            if time.monotonic() > deadline:
                raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, "the client quotas were written, but not yet in effect")
            await asyncio.sleep(0.01)

    def _shows(self, changes: QuotaChanges) -> bool:
        return all(
            self.quotas.get(entity).get(key) == value
            for entity, ops in changes.items()
            for key, value in ops.items()
            if key in QUOTA_KEYS
        )
