"""The seam between the network layer and whatever answers requests.

The network layer knows frames, not Kafka: it hands every complete request frame (the bytes after
the 4-byte size prefix) to a ``RequestHandler`` and writes back what the handler returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from rill.common import FileRegion
from rill.security.channel import ChannelSecurity

ResponseChunk: TypeAlias = bytes | bytearray | memoryview | FileRegion
"""One piece of a response: raw bytes are written as they are, a ``FileRegion`` goes out with ``os.sendfile``.

The handler owns the framing of its response: the chunks together must form the complete frame,
size prefix included.
"""


@dataclass(slots=True)
class ChannelThrottle:
    """Set by the request handler: after the response to the current request is written, read nothing more from
    the connection (and handle none of its requests) for ``mute_ms`` (a client over its quota, KIP-219)."""

    mute_ms: int = 0


@dataclass(slots=True)
class ClientSoftware:
    """What the client said it is in its ApiVersions request (v3+), set by the request handler."""

    name: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """Who is on the other end of a connection (Kafka's connection id format: local-remote-index)."""

    connection_id: str
    client_host: str
    client_port: int
    listener_name: str
    server_host: str = ""
    server_port: int = 0
    security: ChannelSecurity = field(default_factory=ChannelSecurity, compare=False)
    """The connection's security protocol, principal and authentication state (mutable: SASL moves it on)."""
    throttle: ChannelThrottle = field(default_factory=ChannelThrottle, compare=False)
    client_software: ClientSoftware = field(default_factory=ClientSoftware, compare=False)

    def __str__(self) -> str:
        return f"{self.client_host}:{self.client_port} ({self.listener_name})"


class CloseConnection(Exception):
    """Raised by a handler to close the connection the way the protocol asks for (a request the broker does
    not answer, such as an unsupported API version): the network layer logs the message in one line, without
    a traceback, since a misconfigured client may repeat it hundreds of times a second."""


@dataclass(frozen=True, slots=True)
class DeferredResponse:
    """What a handler returns for a request it has handled whose answer is not ready yet: ``task`` gives the
    answer (as ``RequestHandler.handle`` would, and raising as it would). The connection answers its requests in
    order all the same; meanwhile it handles the next request only if ``may_overlap`` allows it."""

    task: asyncio.Future[Sequence[ResponseChunk] | None]


class RequestHandler(Protocol):
    """Answers request frames; one request per connection is handled at a time, in arrival order."""

    async def handle(
        self, conn: ConnectionInfo, frame: memoryview
    ) -> Sequence[ResponseChunk] | DeferredResponse | None:
        """Answer one request frame. ``None`` means no response (Produce with acks=0).

        ``frame`` stays valid (nothing else writes into it) for as long as the handler keeps it.
        Raising closes this connection and only this one.
        """
        ...

    def may_overlap(self, conn: ConnectionInfo, frame: memoryview) -> bool:
        """Whether ``frame`` may be handled while earlier requests of the connection wait for deferred answers
        (False: they are answered first)."""
        ...

    def connection_closed(self, conn: ConnectionInfo) -> None:
        """Called once when a connection closes, for whatever reason."""
        ...
