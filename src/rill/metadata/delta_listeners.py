"""The listeners of a metadata store's deltas, each told every delta, one delta at a time.

A listener that fails to follow a delta (a log it cannot make, say) is not skipped: what the delta held is told to it
again, backing off (half a second, doubling up to five), as the image has it then: the topics it missed in their
current state, the deletions it missed (unless a topic of that name is there again: then its current state), and a
change of the dynamic broker configs. The other listeners are told as usual meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rill.metadata.store import MetadataDelta, MetadataListener, TopicState

log = logging.getLogger(__name__)

BACKOFF_S = 0.5
BACKOFF_MAX_S = 5.0


@dataclass
class _Untold:
    """What a listener failed to follow."""

    names: set[str] = field(default_factory=set)
    deleted: dict[uuid.UUID, TopicState] = field(default_factory=dict)
    broker_configs: bool = False


class DeltaListeners:
    """``image`` gives the topics as the store has them now; ``offset`` its last offset."""

    def __init__(self, image: Callable[[], Mapping[str, TopicState]], offset: Callable[[], int]) -> None:
        self._image = image
        self._offset = offset
        self._listeners: list[MetadataListener] = []
        self._telling = asyncio.Lock()
        self._untold: dict[MetadataListener, _Untold] = {}
        self._retry: asyncio.Task[None] | None = None
        self._closed = False

    def add(self, listener: MetadataListener) -> None:
        self._listeners.append(listener)

    @property
    def pending(self) -> bool:
        """Whether some listener has yet to follow a delta it failed."""
        return bool(self._untold)

    async def tell(self, delta: MetadataDelta) -> None:
        async with self._telling:
            for listener in list(self._listeners):
                await self._tell(listener, delta)

    async def _tell(self, listener: MetadataListener, delta: MetadataDelta) -> None:
        try:
            await listener(delta)
        except Exception:
            log.exception("a broker component could not follow metadata change %d; it will be told again",
                          delta.offset)  # fmt: skip
            untold = self._untold.setdefault(listener, _Untold())
            untold.names.update(t.name for t in delta.changed)
            untold.deleted.update((t.topic_id, t) for t in delta.deleted)
            untold.broker_configs |= delta.broker_configs
            if not self._closed and (self._retry is None or self._retry.done()):
                self._retry = asyncio.create_task(self._tell_again(), name="metadata-listener-retry")

    async def _tell_again(self) -> None:
        delay = BACKOFF_S
        while self._untold:
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)
            async with self._telling:
                image = self._image()
                for listener, untold in list(self._untold.items()):
                    del self._untold[listener]
                    deleted = tuple(t for t in untold.deleted.values() if t.name not in image)
                    names = sorted((untold.names | {t.name for t in untold.deleted.values()}) & set(image))
                    log.info("Telling a broker component again of topics %s (deleted: %s)", names,
                             [t.name for t in deleted])  # fmt: skip
                    delta = MetadataDelta(self._offset(), tuple(image[n] for n in names), deleted,
                                          untold.broker_configs)  # fmt: skip
                    await self._tell(listener, delta)

    async def close(self) -> None:
        self._closed = True
        task, self._retry = self._retry, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def close_now(self) -> None:
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
