"""Client metrics subscriptions (KIP-714's CLIENT_METRICS config resources) in ZooKeeper, where Kafka 2.x keeps
its other entity configs: ``/config/client-metrics/<name>`` (the name percent-encoded, so that any name is one
znode) holds ``{"version": 1, "config": {"metrics": ..., "interval.ms": ..., "match": ...}}``, and each change
is announced by a sequential ``/config/changes/config_change_`` znode ``{"version": 2, "entity_path":
"client-metrics/<name>"}``, written in the same transaction. A subscription whose configs are all deleted has
its znode deleted.

Every broker follows the subscriptions with watches (the list, then each one's znode), so a subscription written
through any broker is offered by all of them; a write returns once this broker's image shows it. A znode that
does not decode is logged and skipped.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient

from rill.errors import ErrorCode, KafkaError
from rill.metadata import zk_layout as zl
from rill.metadata.zk_tx import after_lost_race, committed
from rill.metadata.zk_watches import lasting_children_watch

log = logging.getLogger(__name__)

CLIENT_METRICS = "/config/client-metrics"
CONFIG_CHANGES = "/config/changes"


def znode_name(name: str) -> str:
    """A subscription's name as one znode: percent-encoded (any '/' too), '.' and '..' with their dots encoded."""
    encoded = urllib.parse.quote(name, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def subscription_path(name: str) -> str:
    return f"{CLIENT_METRICS}/{znode_name(name)}"


class ZkClientMetrics:
    def __init__(self, zk: KazooClient, on_loop: Callable[[Callable[[], None]], None]) -> None:
        self._zk = zk
        self._on_loop = on_loop  # runs a function on the event loop (watch callbacks come on kazoo threads)
        self.configs: dict[str, dict[str, str]] = {}
        self._watched: set[str] = set()

    def start(self) -> None:
        """Make the parents and watch the subscriptions (blocking: run in a thread)."""
        self._zk.ensure_path(CLIENT_METRICS)
        self._zk.ensure_path(CONFIG_CHANGES)
        lasting_children_watch(self._zk, CLIENT_METRICS, self._on_names)

    def _on_names(self, names: list[str]) -> bool:
        for child in names:
            if child not in self._watched:
                self._watched.add(child)
                self._zk.DataWatch(f"{CLIENT_METRICS}/{child}", self._watcher(child))
        return True

    def _watcher(self, child: str) -> Callable[..., bool]:
        name = urllib.parse.unquote(child)

        def on_data(data: bytes | None, *_: Any) -> bool:
            try:
                stored = zl.decode_configs(data) if data else {}
            except zl.MalformedZnode as e:
                log.error("skipped the client metrics subscription %s: its znode does not decode (%s)", name, e)
                stored = {}
            self._on_loop(lambda: self._set(name, stored))
            if data is None:
                self._watched.discard(child)
                return False
            return True

        return on_data

    def _set(self, name: str, configs: dict[str, str]) -> None:
        if configs:
            self.configs[name] = configs
        else:
            self.configs.pop(name, None)

    def _write(self, name: str, configs: Mapping[str, str]) -> None:
        """The subscription's znode (set, made, or deleted with its last config) and its change notice in one
        transaction, conditional on the version read (read again when another writer was first): never the one
        without the other."""
        path = subscription_path(name)
        notice = json.dumps({"version": 2, "entity_path": f"client-metrics/{znode_name(name)}"}).encode()
        for attempt in itertools.count(1):
            stat = self._zk.exists(path)
            if stat is None and not configs:
                return
            tx = self._zk.transaction()
            if not configs:
                tx.delete(path, version=stat.version)
            elif stat is None:
                tx.create(path, zl.encode_configs(configs))
            else:
                tx.set_data(path, zl.encode_configs(configs), version=stat.version)
            tx.create(f"{CONFIG_CHANGES}/config_change_", notice, sequence=True)
            if committed(tx.commit()):
                return
            after_lost_race(self._zk, attempt, (CLIENT_METRICS, CONFIG_CHANGES))

    async def alter(self, name: str, configs: Mapping[str, str], timeout_s: float = 30.0) -> None:
        await asyncio.to_thread(self._write, name, configs)
        wanted = dict(configs)
        deadline = time.monotonic() + timeout_s
        while self.configs.get(name, {}) != wanted:
            if time.monotonic() > deadline:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"the client metrics subscription {name} was written, but is not yet in effect",
                )
            await asyncio.sleep(0.02)
