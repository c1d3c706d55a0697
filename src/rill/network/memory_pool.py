"""Reusable buffers for large request frames.

A large Produce request (hundreds of KiB to a few MiB) used to get a fresh ``bytearray`` of its exact
size. Allocating and zero-filling fresh memory for every such frame costs more than receiving it (the
first touch of each new page is slow, more so in a VM), so frames above the direct-read threshold borrow
a buffer from this pool instead and give it back once the request has been answered.

Buffers come in power-of-two sizes; a frame gets a ``memoryview`` of exactly its length over a buffer
of the next size up. A buffer only goes back into the pool when nothing refers to it any more: a
``bytearray`` that still has exported views cannot be resized, so ``release`` tries a one-byte resize
and drops the buffer (leaving it to whoever still holds a view) when that fails. A handler that keeps a
slice of its request therefore never sees those bytes overwritten.
"""

from __future__ import annotations

MIN_POOLED_BYTES = 64 * 1024
"""Smallest buffer the pool hands out."""
MAX_POOLED_BYTES = 16 * 1024 * 1024
"""Larger requests get a buffer of their own that is not kept."""
DEFAULT_POOL_BYTES = 64 * 1024 * 1024
"""How many bytes of idle buffers the pool keeps at most."""


def _bucket_size(size: int) -> int:
    if size <= MIN_POOLED_BYTES:
        return MIN_POOLED_BYTES
    return 1 << (size - 1).bit_length()


class MemoryPool:
    """Idle buffers by size class, bounded in total bytes (not thread safe: owned by the event loop)."""

    __slots__ = ("_free", "_idle_bytes", "allocated", "max_idle_bytes", "reused")

    def __init__(self, max_idle_bytes: int = DEFAULT_POOL_BYTES) -> None:
        self._free: dict[int, list[bytearray]] = {}
        self._idle_bytes = 0
        self.max_idle_bytes = max_idle_bytes
        self.allocated = 0
        """Buffers created so far (a figure for tests and benchmarks)."""
        self.reused = 0
        """Buffers handed out again from the pool."""

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    def acquire(self, size: int) -> tuple[memoryview, bytearray]:
        """A view of exactly ``size`` writable bytes and the buffer behind it (for ``release``)."""
        if size > MAX_POOLED_BYTES:
            buf = bytearray(size)
            self.allocated += 1
            return memoryview(buf), buf
        bucket = _bucket_size(size)
        free = self._free.get(bucket)
        if free:
            buf = free.pop()
            self._idle_bytes -= bucket
            self.reused += 1
        else:
            buf = bytearray(bucket)
            self.allocated += 1
        return memoryview(buf)[:size], buf

    def release(self, buf: bytearray) -> bool:
        """Return ``buf`` once its views are gone; False (and the buffer is dropped) otherwise."""
        bucket = len(buf)
        if bucket > MAX_POOLED_BYTES or bucket != _bucket_size(bucket):
            return False
        if self._idle_bytes + bucket > self.max_idle_bytes:
            return False
        try:
            # Resizing fails while any view of the buffer exists anywhere.
            buf.append(0)
        except BufferError:
            return False
        del buf[-1]
        self._free.setdefault(bucket, []).append(buf)
        self._idle_bytes += bucket
        return True
