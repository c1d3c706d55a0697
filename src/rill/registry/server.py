"""One registry instance: the ``_schemas`` reader, the leader election, the REST app and the HTTP server.

Reads are answered from the local state. A write is answered by the leader; a follower forwards it
(method, path, query and body unchanged) to the leader's URL and then catches up with the topic, so
a client that writes through one instance reads its write back from it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode

from rill.registry import errors as E
from rill.registry.app import RegistryApp
from rill.registry.election import DEFAULT_GROUP, LeaderElection
from rill.registry.http import CONTENT_TYPE, HttpServer
from rill.registry.store import RegistryState
from rill.registry.topic import DEFAULT_TOPIC, SchemaTopic

log = logging.getLogger(__name__)

FORWARDED_HEADER = "x-rill-registry-forwarded"
LEADER_WAIT_S = 30.0


class SchemaRegistry:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        host: str = "127.0.0.1",
        port: int = 8081,
        topic: str = DEFAULT_TOPIC,
        group: str = DEFAULT_GROUP,
        advertised_url: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.host = host
        self.port = port
        self.group = group
        self.advertised_url = advertised_url
        self.timeout_s = timeout_s
        self.state = RegistryState()
        self.topic = SchemaTopic(bootstrap_servers, self.state, topic=topic, timeout_s=timeout_s)
        self.app = RegistryApp(self.state, self.topic, self._is_leader)
        self.http = HttpServer(self._handle, host, port)
        self.election: LeaderElection | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http.port}"

    async def start(self) -> None:
        await self.topic.start()
        await self.http.start()
        self.port = self.http.port
        self.election = LeaderElection(
            self.bootstrap_servers, self.topic.topic, self.advertised_url or self.url, group=self.group
        )
        await asyncio.to_thread(self.election.start)
        log.info("Schema registry listening on %s (topic %s)", self.url, self.topic.topic)

    async def stop(self) -> None:
        await self.http.stop()
        if self.election is not None:
            await asyncio.to_thread(self.election.stop)
        await self.topic.stop()

    async def wait_leader(self, timeout_s: float = LEADER_WAIT_S) -> str:
        """The leader's URL once there is one (50004 after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            url = await asyncio.to_thread(self._leader_url)
            if url is not None:
                return url
            if time.monotonic() > deadline:
                raise E.RegistryError(E.UNKNOWN_LEADER, "No registry leader elected")
            await asyncio.sleep(0.2)

    def _is_leader(self) -> bool:
        return self.election is not None and self.election.is_leader

    def _leader_url(self) -> str | None:
        return None if self.election is None else self.election.leader_url()

    async def _handle(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> tuple[int, Any]:
        if not self.app.is_write(method, path):
            return await self.app.handle(method, path, query, body)
        try:
            return await self._handle_write(method, path, query, headers, body)
        except E.RegistryError as e:
            return e.status, e.body()

    async def _handle_write(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> tuple[int, Any]:
        deadline = time.monotonic() + LEADER_WAIT_S
        forwarded = FORWARDED_HEADER in headers
        while True:
            election = self.election
            if election is not None and election.is_leader:
                status, payload = await self.app.handle(method, path, query, body)
                lost = isinstance(payload, dict) and payload.get("error_code") == E.UNKNOWN_LEADER
                if not lost or forwarded or time.monotonic() > deadline:
                    return status, payload
                continue  # leadership moved while this write waited: forward it
            if forwarded:  # the forwarding instance retries with the leader it finds next
                raise E.RegistryError(E.UNKNOWN_LEADER, f"{self.url} is not the registry leader")
            leader = await self.wait_leader(max(0.0, deadline - time.monotonic()))
            if leader == (self.advertised_url or self.url):
                continue  # elected meanwhile
            status, payload = await asyncio.to_thread(self._forward, leader, method, path, query, body)
            # A leader that is not (or no longer) one, or cannot be reached (a dead leader stays a member of
            # the group until its session times out): ask again until the deadline.
            retry = (E.UNKNOWN_LEADER, E.FORWARDING_FAILED)
            if status == 500 and isinstance(payload, dict) and payload.get("error_code") in retry:
                if time.monotonic() > deadline:
                    return status, payload
                await asyncio.sleep(0.2)
                continue
            with contextlib.suppress(E.RegistryError):
                await self.topic.catch_up()  # read-your-writes through this instance
            return status, payload

    def _forward(self, leader: str, method: str, path: str, query: dict[str, str], body: bytes) -> tuple[int, Any]:
        import json

        url = leader.rstrip("/") + path + ("?" + urlencode(query) if query else "")
        request = urllib.request.Request(
            url,
            data=body if body else None,
            method=method,
            headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE, FORWARDED_HEADER: "1"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw, status = response.read(), response.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        except (urllib.error.URLError, OSError) as e:
            return 500, {
                "error_code": E.FORWARDING_FAILED,
                "message": f"Error while forwarding the request to the leader: {e}",
            }
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return 500, {"error_code": E.FORWARDING_FAILED, "message": "The leader's answer was not JSON"}


class RegistryThread:
    """A registry on its own event loop in a background thread (tests, the broker-embedded start)."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return self.registry.url

    def start(self, timeout_s: float = 60.0) -> RegistryThread:
        started = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            self._stopped = asyncio.Event()
            try:
                await self.registry.start()
            except BaseException as e:
                failure.append(e)
                started.set()
                with contextlib.suppress(Exception):
                    await self.registry.stop()
                return
            started.set()
            await self._stopped.wait()
            await self.registry.stop()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(main())
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=run, name="schema-registry", daemon=True)
        self._thread.start()
        if not started.wait(timeout_s):
            raise TimeoutError(f"schema registry did not start in {timeout_s} s")
        if failure:
            self._thread.join(10.0)
            raise RuntimeError(f"schema registry did not start: {failure[0]}") from failure[0]
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and self._thread is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stopped.set)
            self._thread.join(timeout_s)
