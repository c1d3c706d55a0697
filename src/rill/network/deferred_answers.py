"""Deferred answers of a client connection (a part of ``KafkaConnection``): requests handled whose answers wait.

A handler answers a request it has handled but cannot answer yet (an acks=all Produce waiting for its followers)
with a ``DeferredResponse``; the connection's worker keeps it in ``_deferred``, in request order, and answers the
oldest one once its task is done (see ``connection``). ``DeferredAnswers`` holds no state of its own: it works on
the deque, the failure flag and the frame-arrival future that ``KafkaConnection`` makes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rill.network.handler import CloseConnection, ConnectionInfo, DeferredResponse, ResponseChunk

if TYPE_CHECKING:
    from rill.network.server import SocketServer


class Failed(Exception):
    """The handler failed on a request whose answer waited behind deferred ones (logged when it failed)."""


class DeferredAnswers:
    """Answering deferred requests for ``KafkaConnection`` (a base class of it)."""

    closed: bool
    info: ConnectionInfo
    _loop: asyncio.AbstractEventLoop
    _server: SocketServer
    _deferred: collections.deque[DeferredResponse]
    _failing: bool
    _arrived: asyncio.Future[None] | None

    if TYPE_CHECKING:

        def _refill(self) -> None: ...

        async def _answered(
            self, response: Sequence[ResponseChunk] | None, failed: bool, size: int, buf: bytearray | None
        ) -> bool: ...

    def _handler_failed(self, e: Exception) -> None:
        if isinstance(e, CloseConnection):
            self._server.peer_log("close", logging.INFO, "closing connection from %s: %s", self.info, e)
        else:
            self._server.peer_log(
                "handler failed",
                logging.ERROR,
                "closing connection from %s: request handler failed",
                self.info,
                exc_info=e,
            )

    def _deferred_done(self, task: asyncio.Future[Sequence[ResponseChunk] | None]) -> None:
        """A deferred answer that failed closes the connection once the answers before it are out: from now on
        no request is handled (frames still taken in are dropped with the connection)."""
        if not task.cancelled() and task.exception() is not None:
            self._failing = True

    async def _answer_deferred(self, *, wait_for_frame: bool) -> bool:
        """Write the oldest deferred answer once it is ready. With ``wait_for_frame``, return early (True) when a
        frame is queued first. False: the worker stops (as ``_answered``)."""
        deferred = self._deferred[0].task
        if not deferred.done():
            arrived = self._arrived = self._loop.create_future() if wait_for_frame else None
            try:
                await asyncio.wait((deferred,) if arrived is None else (deferred, arrived),
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            finally:
                self._arrived = None
            if not deferred.done() or self.closed:
                return not self.closed
        self._deferred.popleft()
        self._refill()
        failed = False
        response = None
        if deferred.cancelled():
            failed = True
        elif (error := deferred.exception()) is not None:
            failed = True
            if not isinstance(error, Failed):
                self._handler_failed(error if isinstance(error, Exception) else RuntimeError(repr(error)))
        else:
            response = deferred.result()
        return await self._answered(response, failed, 0, None)

    def _drop_deferred(self) -> None:
        """Let go of the deferred answers left when the worker stops (the connection is closing)."""
        while self._deferred:
            self._deferred.popleft().task.cancel()
