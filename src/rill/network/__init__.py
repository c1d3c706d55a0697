"""Listeners and connections: size-prefixed framing, in-order responses, zero-copy file sends.

No protocol knowledge lives here: frames go to a ``RequestHandler`` and its chunks come back.
"""

from rill.network.event_loop import new_event_loop, run
from rill.network.handler import ConnectionInfo, RequestHandler, ResponseChunk
from rill.network.server import ListenerAddress, SocketServer

__all__ = [
    "ConnectionInfo",
    "ListenerAddress",
    "RequestHandler",
    "ResponseChunk",
    "SocketServer",
    "new_event_loop",
    "run",
]
