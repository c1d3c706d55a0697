"""An asyncio Kafka-protocol client for requests between brokers, after Kafka's ``NetworkClient``.

``NetworkClient`` keeps one connection per node id and opens a new one when a request needs it. After a
failed connection attempt or a broken connection, the next attempt waits ``reconnect.backoff.ms`` doubled per
consecutive failure up to ``reconnect.backoff.max.ms``, with +/-20% jitter (Kafka's exponential backoff); a
connection that completes its ApiVersions exchange resets the count. A request waits out that backoff
(within its own timeout) rather than failing, then makes one connection attempt; a failed attempt fails the
request with ``NetworkException`` and retrying is the caller's choice.

Each connection is a ``BrokerConnection`` (rill.cluster.channel): version negotiation, pipelined requests,
timeouts and the failure of requests in flight when it closes are its own.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rill.cluster.channel import (
    BrokerConnection,
    ClientResponse,
    NetworkClientConfig,
    NetworkException,
    TimeoutException,
)


class ExponentialBackoff:
    """``initial_ms * multiplier ** attempts``, capped at ``max_ms``, times a random factor in
    ``[1 - jitter, 1 + jitter]`` (and capped again); ``initial_ms`` alone when ``max_ms <= initial_ms``."""

    def __init__(self, initial_ms: float, multiplier: float, max_ms: float, jitter: float) -> None:
        self.initial_ms = initial_ms
        self.multiplier = multiplier
        self.max_ms = max_ms
        self.jitter = jitter
        self._exp_max = math.log(max_ms / max(initial_ms, 1)) / math.log(multiplier) if max_ms > initial_ms else 0.0

    def backoff_ms(self, attempts: int) -> float:
        if self._exp_max == 0:
            return self.initial_ms
        term = self.initial_ms * math.pow(self.multiplier, min(attempts, self._exp_max))
        factor = random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter > 0 else 1.0
        return min(term * factor, self.max_ms)


@dataclass(slots=True)
class _Node:
    node_id: int
    host: str
    port: int
    connection: BrokerConnection | None = None
    connecting: asyncio.Task[BrokerConnection] | None = None
    failed_attempts: int = 0
    last_attempt: float = -math.inf  # loop time of the last connection attempt or disconnection
    backoff_ms: float = 0.0


class NetworkClient:
    """Connections to several brokers by node id; see the module docstring."""

    def __init__(
        self, config: NetworkClientConfig | None = None, nodes: Mapping[int, tuple[str, int]] | None = None
    ) -> None:
        self.config = config or NetworkClientConfig()
        self._backoff = ExponentialBackoff(
            self.config.reconnect_backoff_ms, 2, self.config.reconnect_backoff_max_ms, 0.2
        )
        self._nodes: dict[int, _Node] = {}
        self._closed = False
        for node_id, (host, port) in (nodes or {}).items():
            self.set_node(node_id, host, port)

    def set_node(self, node_id: int, host: str, port: int) -> None:
        """Add a node, or move it to a new address (its current connection, if any, is closed)."""
        node = self._nodes.get(node_id)
        if node is not None and (node.host, node.port) == (host, port):
            return
        if node is not None:
            self._drop(node, f"closed: node {node_id} moved to {host}:{port}")
        self._nodes[node_id] = _Node(node_id, host, port)

    def remove_node(self, node_id: int) -> None:
        node = self._nodes.pop(node_id, None)
        if node is not None:
            self._drop(node, f"closed: node {node_id} was removed")

    def _drop(self, node: _Node, reason: str) -> None:
        if node.connecting is not None:
            node.connecting.cancel()
        if node.connection is not None:
            node.connection._shutdown(reason, abort=False)

    def _node(self, node_id: int) -> _Node:
        if self._closed:
            raise NetworkException("the network client is closed")
        node = self._nodes.get(node_id)
        if node is None:
            raise NetworkException(f"unknown node {node_id}")
        return node

    def is_ready(self, node_id: int) -> bool:
        node = self._nodes.get(node_id)
        return node is not None and node.connection is not None and node.connection.ready

    def connection_delay_ms(self, node_id: int) -> float:
        """How long until a connection attempt to the node is allowed (0 when connected or allowed now)."""
        node = self._node(node_id)
        if node.connection is not None and node.connection.ready:
            return 0.0
        wait = node.last_attempt + node.backoff_ms / 1000 - asyncio.get_running_loop().time()
        return max(0.0, wait * 1000)

    async def ready(self, node_id: int, *, timeout_ms: float | None = None) -> BrokerConnection:
        """The node's connection, opened (after any reconnect backoff) if needed."""
        loop = asyncio.get_running_loop()
        timeout_s = (self.config.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        return await self._ready(self._node(node_id), loop.time() + timeout_s)

    async def _ready(self, node: _Node, deadline: float) -> BrokerConnection:
        conn = node.connection
        if conn is not None and conn.ready:
            return conn
        task = node.connecting
        if task is None:
            task = node.connecting = asyncio.get_running_loop().create_task(self._connect(node))
            task.add_done_callback(_retrieve)
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(task)
        except TimeoutError:
            raise TimeoutException(f"no connection to node {node.node_id} ({node.host}:{node.port}) in time") from None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or current.cancelling() == 0):
                # the attempt was abandoned (client closed, node moved or removed), not this request
                raise NetworkException(
                    f"connection attempt to node {node.node_id} ({node.host}:{node.port}) was abandoned"
                    + (": the network client is closed" if self._closed else "")
                ) from None
            raise

    async def _connect(self, node: _Node) -> BrokerConnection:
        loop = asyncio.get_running_loop()
        try:
            delay = node.last_attempt + node.backoff_ms / 1000 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            node.last_attempt = loop.time()
            conn = BrokerConnection(node.host, node.port, self.config, node_id=node.node_id)
            try:
                await conn.connect()
            except BaseException:
                self._failed(node)
                raise
            node.failed_attempts = 0
            node.backoff_ms = 0.0
            node.connection = conn
            conn.add_close_callback(lambda c: self._disconnected(node, c))
            return conn
        finally:
            node.connecting = None

    def _failed(self, node: _Node) -> None:
        node.last_attempt = asyncio.get_running_loop().time()
        node.backoff_ms = self._backoff.backoff_ms(node.failed_attempts)
        node.failed_attempts += 1

    def _disconnected(self, node: _Node, conn: BrokerConnection) -> None:
        if node.connection is conn:
            node.connection = None
            self._failed(node)

    async def request(
        self,
        node_id: int,
        api_key: int,
        body: dict[str, Any],
        *,
        version: int | None = None,
        max_version: int | None = None,
        timeout_ms: float | None = None,
    ) -> ClientResponse | None:
        """Send a request to a node, connecting first if needed; the timeout covers both."""
        loop = asyncio.get_running_loop()
        timeout_s = (self.config.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        deadline = loop.time() + timeout_s
        conn = await self._ready(self._node(node_id), deadline)
        remaining_ms = max(deadline - loop.time(), 0.001) * 1000
        return await conn.request(api_key, body, version=version, max_version=max_version, timeout_ms=remaining_ms)

    async def __aenter__(self) -> NetworkClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every connection; requests in flight fail with ``DisconnectException``."""
        self._closed = True
        nodes = list(self._nodes.values())
        for node in nodes:
            if node.connecting is not None:
                node.connecting.cancel()
        for node in nodes:
            if node.connection is not None:
                await node.connection.close()


def _retrieve(task: asyncio.Task[BrokerConnection]) -> None:
    """Mark a connection attempt's failure as seen (its waiters may all have given up)."""
    if not task.cancelled():
        task.exception()
