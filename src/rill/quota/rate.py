"""Kafka's sampled rate (``SampledStat`` with a windowed sum, ``Rate``) and the throttle time of a violated quota
(``QuotaUtils``), in milliseconds of a monotonic clock.

A stat keeps ``samples + 1`` windows of ``window_ms`` each in a ring (the extra one overlaps the start of the
measured span). A value is added to the current window; once that window is ``window_ms`` old the next one in the
ring is reset and becomes current. A window whose last event is ``samples * window_ms`` old is reset when measured.

The rate is the sum of the windows divided by the time they span: from the start of the oldest window to now, but
never less than ``samples - 1`` whole windows (so the first values after a quiet spell are not divided by a few
milliseconds) and never less than 1 ms.

When a rate ``O`` is above its bound ``T``, the client is throttled for ``X`` such that ``O * W / (W + X) = T``
over the span ``W`` the rate was measured on: ``X = (O - T) / T * W``, rounded to whole milliseconds.

A windowed rate forgets a window's values all at once, when the window leaves the measured span: a client held
to its bound after a burst gets the burst's worth again as soon as the burst's window leaves, so a client that
wants more than its bound gets it in waves one span apart. Client quotas are held by a :class:`TokenBucket`
instead (Kafka's, of KIP-599): credits refill at the bound up to a burst; a value takes its size from them, and a
client whose credits are below zero waits until they are back at zero.
"""

from __future__ import annotations

import math


class SampledStat:
    """A ring of windows, each with a start, the time of its last event, a value and an event count."""

    __slots__ = ("_count", "_current", "_last", "_start", "_value", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._start: list[int] = []
        self._last: list[int] = []
        self._value: list[float] = []
        self._count: list[int] = []
        self._current = 0

    def _new(self, now_ms: int) -> None:
        self._start.append(now_ms)
        self._last.append(now_ms)
        self._value.append(0.0)
        self._count.append(0)

    def _reset(self, i: int, now_ms: int) -> None:
        self._start[i] = now_ms
        self._last[i] = now_ms
        self._value[i] = 0.0
        self._count[i] = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._start:
            self._new(now_ms)
        i = self._current
        if now_ms - self._start[i] >= self.window_ms:
            i = self._current = (i + 1) % (self.samples + 1)
            if i >= len(self._start):
                self._new(now_ms)
            else:
                self._reset(i, now_ms)
        self._value[i] += value
        self._count[i] += 1
        self._last[i] = now_ms

    def purge_obsolete(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i in range(len(self._start)):
            if now_ms - self._last[i] >= expire:
                self._reset(i, now_ms)

    def total(self, now_ms: int) -> float:
        self.purge_obsolete(now_ms)
        return sum(self._value)

    def events(self, now_ms: int) -> int:
        self.purge_obsolete(now_ms)
        return sum(self._count)

    def oldest_start(self, now_ms: int) -> int:
        if not self._start:
            self._new(now_ms)
        return min(self._start)


class Rate:
    """Kafka's ``Rate`` over a windowed sum: units per second."""

    __slots__ = ("stat",)

    def __init__(self, samples: int, window_ms: int) -> None:
        self.stat = SampledStat(samples, window_ms)

    def record(self, value: float, now_ms: int) -> None:
        self.stat.record(value, now_ms)

    def window_size_ms(self, now_ms: int) -> int:
        stat = self.stat
        stat.purge_obsolete(now_ms)
        elapsed = now_ms - stat.oldest_start(now_ms)
        full = elapsed // stat.window_ms
        least = stat.samples - 1
        if full < least:
            elapsed += (least - full) * stat.window_ms
        return max(elapsed, 1)

    def measure(self, now_ms: int) -> float:
        total = self.stat.total(now_ms)
        return total / (self.window_size_ms(now_ms) / 1000.0)


class Avg:
    """Kafka's ``Avg`` over sampled windows (the throttle-time metric): NaN before any event, as Kafka reports."""

    __slots__ = ("stat",)

    def __init__(self, samples: int = 2, window_ms: int = 30_000) -> None:
        self.stat = SampledStat(samples, window_ms)

    def record(self, value: float, now_ms: int) -> None:
        self.stat.record(value, now_ms)

    def measure(self, now_ms: int) -> float:
        count = self.stat.events(now_ms)
        return self.stat.total(now_ms) / count if count else float("nan")


class TokenBucket:
    """Credits that refill at ``bound`` per second up to ``bound * burst_ms / 1000`` (Kafka's ``TokenBucket``).

    A new bucket is full, and refills only once ``burst_ms`` have passed: a new group may use its burst at once
    but gets no more over its first ``burst_ms`` (as Kafka's rate counts a new group's first span as whole
    windows). The bound is given with each call, so a changed quota applies at once."""

    __slots__ = ("burst_ms", "credits", "last_ms")

    def __init__(self, burst_ms: int, now_ms: int) -> None:
        self.burst_ms = burst_ms
        self.credits = math.inf  # the burst, at the first refill
        self.last_ms = now_ms + burst_ms

    def _refill(self, bound: float, now_ms: int) -> float:
        burst = bound * self.burst_ms / 1000.0
        if now_ms > self.last_ms:
            self.credits += bound * (now_ms - self.last_ms) / 1000.0
            self.last_ms = now_ms
        self.credits = min(burst, self.credits)
        return burst

    def record(self, value: float, bound: float, now_ms: int) -> None:
        """Take ``value`` from the credits (a negative value gives it back, never above the burst)."""
        burst = self._refill(bound, now_ms)
        self.credits = min(burst, self.credits - value)

    def throttle_ms(self, bound: float, now_ms: int) -> int:
        """How long until the credits are back at zero (0 when they are not below it)."""
        self._refill(bound, now_ms)
        if self.credits >= 0 or bound <= 0:
            return 0
        wait_s = max(self.last_ms - now_ms, 0) / 1000.0 - self.credits / bound
        return math.floor(wait_s * 1000.0 + 0.5)


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """How long to delay a client measured at ``observed`` over ``window_ms`` to bring it to ``bound``."""
    if observed <= bound or bound <= 0:
        return 0
    return math.floor((observed - bound) / bound * window_ms + 0.5)  # Java's Math.round
