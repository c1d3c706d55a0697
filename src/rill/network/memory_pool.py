"""Buffers for large request frames: reused when warm, lazily mapped when not, bounded either way.

A large Produce request (hundreds of KiB to a few MiB) used to get a fresh ``bytearray`` of its exact
size. Allocating and zero-filling fresh memory for every such frame costs more than receiving it (the
first touch of each new page is slow, more so in a VM), so frames above the direct-read threshold borrow
a buffer from this pool instead and give it back once the request has been answered.

Buffers come in power-of-two sizes; a frame gets a ``memoryview`` of exactly its length over a buffer
of the next size up. A buffer only goes back into the pool when nothing refers to it any more: a
``bytearray`` that still has exported views cannot be resized, so ``release`` tries a one-byte resize
and drops the buffer (leaving it to whoever still holds a view) when that fails. A handler that keeps a
slice of its request therefore never sees those bytes overwritten.

The pool owns at most ``max_bytes`` of buffers, idle or lent out (idle buffers of other sizes are
dropped to make room). A frame the pool cannot serve (larger than ``MAX_POOLED_BYTES``, or the pool is
full) gets an anonymous memory map of its own: the kernel gives it pages only as bytes are written into
it, so a frame that declares 100 MiB and sends ten bytes holds a page, not 100 MiB; the map is unmapped
once the last view of it is gone.
"""

from __future__ import annotations

import mmap

MIN_POOLED_BYTES = 64 * 1024
"""Smallest buffer the pool hands out."""
MAX_POOLED_BYTES = 16 * 1024 * 1024
"""Larger requests get a lazily mapped buffer of their own that is not kept."""
DEFAULT_POOL_BYTES = 64 * 1024 * 1024
"""How many bytes of buffers the pool owns at most."""


def _bucket_size(size: int) -> int:
    if size <= MIN_POOLED_BYTES:
        return MIN_POOLED_BYTES
    return 1 << (size - 1).bit_length()


def lazy_buffer(size: int) -> memoryview:
    """``size`` writable bytes whose memory is taken page by page as they are written."""
    return memoryview(mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE))[:size]


class MemoryPool:
    """Buffers by size class, bounded in total bytes (not thread safe: owned by the event loop)."""

    __slots__ = ("_free", "_idle_bytes", "_owned_bytes", "allocated", "lazy", "max_bytes", "reused")

    def __init__(self, max_bytes: int = DEFAULT_POOL_BYTES) -> None:
        self._free: dict[int, list[bytearray]] = {}
        self._idle_bytes = 0
        self._owned_bytes = 0
        self.max_bytes = max_bytes
        self.allocated = 0
        """Pooled buffers created so far (a figure for tests and benchmarks)."""
        self.reused = 0
        """Buffers handed out again from the pool."""
        self.lazy = 0
        """Frames given a lazily mapped buffer of their own."""

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    @property
    def owned_bytes(self) -> int:
        """Bytes of pooled buffers, idle or lent out."""
        return self._owned_bytes

    def acquire(self, size: int) -> tuple[memoryview, bytearray | None]:
        """A view of exactly ``size`` writable bytes and the pooled buffer behind it (for ``release``;
        None when the view is over a lazily mapped buffer of its own)."""
        if size > MAX_POOLED_BYTES:
            self.lazy += 1
            return lazy_buffer(size), None
        bucket = _bucket_size(size)
        free = self._free.get(bucket)
        if free:
            buf = free.pop()
            self._idle_bytes -= bucket
            self.reused += 1
            return memoryview(buf)[:size], buf
        if self._owned_bytes + bucket > self.max_bytes:
            self._drop_idle(self._owned_bytes + bucket - self.max_bytes)
            if self._owned_bytes + bucket > self.max_bytes:
                self.lazy += 1
                return lazy_buffer(size), None
        buf = bytearray(bucket)
        self._owned_bytes += bucket
        self.allocated += 1
        return memoryview(buf)[:size], buf

    def _drop_idle(self, need: int) -> None:
        """Drop idle buffers (largest first) until ``need`` bytes are freed or none is idle."""
        for bucket in sorted(self._free, reverse=True):
            free = self._free[bucket]
            while free and need > 0:
                free.pop()
                self._idle_bytes -= bucket
                self._owned_bytes -= bucket
                need -= bucket
            if need <= 0:
                return

    def release(self, buf: bytearray) -> bool:
        """Return ``buf`` once its views are gone; False (and the buffer is dropped) otherwise."""
        bucket = len(buf)
        try:
            # Resizing fails while any view of the buffer exists anywhere.
            buf.append(0)
        except BufferError:
            self._owned_bytes -= bucket  # left to whoever still holds a view
            return False
        del buf[-1]
        self._free.setdefault(bucket, []).append(buf)
        self._idle_bytes += bucket
        return True
