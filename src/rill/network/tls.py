"""File regions over TLS: no ``os.sendfile``, since the bytes must be encrypted on their way out.

A TLS connection reads a region's bytes from its file (``os.pread``, from the page cache) in pieces and writes
them through the TLS transport, waiting for the transport's write buffer to drain between pieces, so a large
fetch holds at most a piece and the buffer's high mark in memory.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from rill.common import FileRegion

log = logging.getLogger("rill.network")

PIECE_BYTES = 256 * 1024


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
