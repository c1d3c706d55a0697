"""Where requests wait for a condition: delayed fetches waiting for data on the partitions they read.

A waiter registers a future under each partition it watches; an append to a partition completes the futures
watching it. The waiter then re-checks its own condition (``min_bytes``) and waits again if needed, until its
deadline. Everything runs on the event loop thread.

On broker shutdown ``close`` ends every wait at once, and any wait after it, with ``PurgatoryClosed``, so that
no request holds the shutdown up for the rest of its wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from rill.common import TopicPartition


class PurgatoryClosed(Exception):
    """The broker is shutting down: the delayed operation ends now."""


class DelayedOperationPurgatory:
    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[TopicPartition, set[asyncio.Future[None]]] = {}
        self._waiting = 0
        self._closed = False

    @property
    def size(self) -> int:
        """How many operations wait now."""
        return self._waiting

    async def wait(self, keys: Iterable[TopicPartition], timeout: float) -> bool:
        """Wait until one of ``keys`` is completed or ``timeout`` seconds pass; True when woken.
        Raises PurgatoryClosed once ``close`` was called."""
        if self._closed:
            raise PurgatoryClosed(f"{self.name} purgatory closed: the broker is shutting down")
        if timeout <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        watched = list(keys)
        for key in watched:
            self._watchers.setdefault(key, set()).add(fut)
        self._waiting += 1
        try:
            await asyncio.wait_for(fut, timeout)
            if self._closed:
                raise PurgatoryClosed(f"{self.name} purgatory closed: the broker is shutting down")
            return True
        except TimeoutError:
            return False
        finally:
            self._waiting -= 1
            for key in watched:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._watchers[key]

    def check_and_complete(self, key: TopicPartition) -> None:
        """Wake every operation watching ``key``."""
        waiters = self._watchers.pop(key, None)
        if not waiters:
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def wake_all(self) -> None:
        for key in list(self._watchers):
            self.check_and_complete(key)

    def close(self) -> None:
        """End every wait now and refuse new ones (broker shutdown)."""
        self._closed = True
        self.wake_all()
