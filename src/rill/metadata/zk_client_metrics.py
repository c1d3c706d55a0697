"""Client metrics subscriptions (KIP-714's CLIENT_METRICS config resources) in ZooKeeper, where Kafka 2.x keeps
its other entity configs: ``/config/client-metrics/<name>`` holds ``{"version": 1, "config": {"metrics": ...,
"interval.ms": ..., "match": ...}}``, and each change is announced by a sequential
``/config/changes/config_change_`` znode ``{"version": 2, "entity_path": "client-metrics/<name>"}``. A
subscription whose configs are all deleted has its znode deleted.

Every broker follows the subscriptions with watches (the list, then each one's znode), so a subscription written
through any broker is offered by all of them; a write returns once this broker's image shows it. A znode that
does not decode is logged and skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NotEmptyError

from rill.errors import ErrorCode, KafkaError
from rill.metadata import zk_layout as zl
from rill.metadata.zk_watches import lasting_children_watch

log = logging.getLogger(__name__)

CLIENT_METRICS = "/config/client-metrics"
CONFIG_CHANGES = "/config/changes"


def subscription_path(name: str) -> str:
    return f"{CLIENT_METRICS}/{name}"


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
        for name in names:
            if name not in self._watched:
                self._watched.add(name)
                self._zk.DataWatch(subscription_path(name), self._watcher(name))
        return True

    def _watcher(self, name: str) -> Callable[..., bool]:
        def on_data(data: bytes | None, *_: Any) -> bool:
            try:
                stored = zl.decode_configs(data) if data else {}
            except zl.MalformedZnode as e:
                log.error("skipped the client metrics subscription %s: its znode does not decode (%s)", name, e)
                stored = {}
            self._on_loop(lambda: self._set(name, stored))
            if data is None:
                self._watched.discard(name)
                return False
            return True

        return on_data

    def _set(self, name: str, configs: dict[str, str]) -> None:
        if configs:
            self.configs[name] = configs
        else:
            self.configs.pop(name, None)

    async def alter(self, name: str, configs: Mapping[str, str], timeout_s: float = 30.0) -> None:
        def write() -> None:
            path = subscription_path(name)
            if configs:
                data = zl.encode_configs(configs)
                try:
                    self._zk.set(path, data)
                except NoNodeError:
                    self._zk.create(path, data, makepath=True)
            else:
                with contextlib.suppress(NoNodeError, NotEmptyError):
                    self._zk.delete(path)
            notice = json.dumps({"version": 2, "entity_path": f"client-metrics/{name}"}).encode()
            self._zk.create(f"{CONFIG_CHANGES}/config_change_", notice, sequence=True, makepath=True)

        await asyncio.to_thread(write)
        wanted = dict(configs)
        deadline = time.monotonic() + timeout_s
        while self.configs.get(name, {}) != wanted:
            if time.monotonic() > deadline:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"the client metrics subscription {name} was written, but is not yet in effect",
                )
            await asyncio.sleep(0.02)
