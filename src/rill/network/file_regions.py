"""Sending a ``FileRegion`` (log bytes a response refers to) on a connection.

Plain TCP (``sendfile_region``): a raw non-blocking ``os.sendfile`` on the socket, once the transport's write
buffer is empty (so bytes never overtake each other); on EAGAIN the caller waits for writability. The event
loop gets a turn every ``SENDFILE_YIELD_BYTES``.

TLS (``write_region``): no ``os.sendfile``, since the bytes must be encrypted on their way out. The region's
bytes are read from its file (``os.pread``, from the page cache) in pieces and written through the TLS
transport, waiting for the transport's write buffer to drain between pieces, so a large fetch holds at most a
piece and the buffer's high mark in memory.

Either way a region whose file turns out shorter than its length fails the send (the caller aborts the
connection) instead of sending a frame that lies about its size.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from rill.common import FileRegion

log = logging.getLogger("rill.network")

PIECE_BYTES = 256 * 1024
SENDFILE_YIELD_BYTES = 16 * 1024 * 1024


async def sendfile_region(
    sock_fd: int,
    region: FileRegion,
    wait_writable: Callable[[], Awaitable[None]],
    closed: Callable[[], bool],
    peer: object,
) -> bool:
    """Send ``region`` on the socket ``sock_fd``; False when the connection closed or the send failed (the
    caller aborts then). ``peer`` names the connection in log lines."""
    position = region.position
    remaining = region.length
    since_yield = 0
    while remaining > 0:
        try:
            sent = os.sendfile(sock_fd, region.fd, position, remaining)
        except BlockingIOError:
            await wait_writable()
            if closed():
                return False
            since_yield = 0
            continue
        except InterruptedError:
            continue
        except ConnectionError as exc:  # the client went away (EPIPE, ECONNRESET): normal, not a fault
            log.debug("closing connection from %s: sendfile failed: %s", peer, exc)
            return False
        except OSError as exc:
            log.warning("closing connection from %s: sendfile failed: %s", peer, exc)
            return False
        if sent == 0:
            log.error("closing connection from %s: file region (fd %d, position %d, length %d) is %d bytes short"
                      " (file truncated)", peer, region.fd, region.position, region.length, remaining)  # fmt: skip
            return False
        position += sent
        remaining -= sent
        since_yield += sent
        if since_yield >= SENDFILE_YIELD_BYTES and remaining > 0:
            since_yield = 0
            await asyncio.sleep(0)
            if closed():
                return False
    return True


async def write_region(
    transport: asyncio.Transport,
    region: FileRegion,
    drain: Callable[[], Awaitable[None]],
    closed: Callable[[], bool],
) -> bool:
    """Write ``region`` through ``transport``; False when the connection closed or the file is short (the
    caller aborts then: a frame must never lie about its size)."""
    position, remaining = region.position, region.length
    while remaining > 0:
        try:
            data = os.pread(region.fd, min(remaining, PIECE_BYTES), position)
        except OSError as exc:
            log.warning("reading file region (fd %d) for a TLS connection failed: %s", region.fd, exc)
            return False
        if not data:
            log.error("file region (fd %d, position %d, length %d) is %d bytes short (file truncated)",
                      region.fd, region.position, region.length, remaining)  # fmt: skip
            return False
        transport.write(data)
        position += len(data)
        remaining -= len(data)
        await drain()
        if closed():
            return False
    return True
