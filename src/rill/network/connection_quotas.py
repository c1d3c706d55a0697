"""Kafka's connection quotas: ``max.connections`` for the whole broker and ``max.connections.per.ip``
(with ``max.connections.per.ip.overrides``) for each client address.

As in Kafka, the two limits act differently. A client address at its limit has the new connection
closed at once. A broker at ``max.connections`` stops taking connections in: the socket server
holds each new one unread, in arrival order, until an open connection closes (Kafka's acceptor
waits for a slot, leaving connections in the listen backlog; a held connection looks the same to
its client). Lowering ``max.connections`` below the open count closes the connections idle the
longest until the count fits.

``max.connection.creation.rate`` (KIP-612's broker-wide limit): new connections are counted in a rate over the
client quota windows (``quota.window.num`` of ``quota.window.size.seconds``); one that takes the rate above the
limit waits, unread, for the time that brings the rate back to it, and the connections after it wait behind it,
as Kafka's acceptor blocks.

This module only counts; the socket server decides what to do with the answers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from rill.quota.rate import Rate, throttle_time_ms

INT_MAX = 2**31 - 1


class ConnectionQuotas:
    """Open connections in total and per client address, against the configured limits."""

    max_connections: int
    max_per_ip: int
    per_ip_overrides: dict[str, int]

    def __init__(
        self,
        max_connections: int = INT_MAX,
        max_per_ip: int = INT_MAX,
        per_ip_overrides: Mapping[str, int] = {},
        max_creation_rate: int = INT_MAX,
        *,
        samples: int = 11,
        window_s: int = 1,
    ) -> None:
        self.total = 0
        self._counts: dict[str, int] = {}
        self.max_creation_rate = max_creation_rate
        self._creations = Rate(samples, window_s * 1000)
        self.update(max_connections, max_per_ip, per_ip_overrides)

    def record_connection(self, now_ms: int) -> int:
        """Count a new connection; how long it must wait (ms) under ``max.connection.creation.rate``."""
        limit = self.max_creation_rate
        if limit >= INT_MAX:
            return 0
        rate = self._creations
        rate.record(1.0, now_ms)
        observed = rate.measure(now_ms)
        return throttle_time_ms(observed, limit, rate.window_size_ms(now_ms)) if observed > limit else 0

    def update(self, max_connections: int, max_per_ip: int, per_ip_overrides: Mapping[str, int]) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.per_ip_overrides = {_normalized(k): v for k, v in per_ip_overrides.items()}

    def slot_available(self) -> bool:
        return self.total < self.max_connections

    @property
    def excess(self) -> int:
        """How many open connections are above ``max_connections`` (after it was lowered)."""
        return max(0, self.total - self.max_connections)

    def limit_for(self, host: str) -> int:
        return self.per_ip_overrides.get(_normalized(host), self.max_per_ip)

    def count(self, host: str) -> int:
        return self._counts.get(_normalized(host), 0)

    def try_inc(self, host: str) -> bool:
        """Count a new connection from ``host``; False (and nothing counted) when the address is at
        its limit."""
        key = _normalized(host)
        count = self._counts.get(key, 0)
        if count >= self.per_ip_overrides.get(key, self.max_per_ip):
            return False
        self._counts[key] = count + 1
        self.total += 1
        return True

    def dec(self, host: str) -> None:
        key = _normalized(host)
        count = self._counts.get(key, 0)
        if count <= 1:
            self._counts.pop(key, None)
        else:
            self._counts[key] = count - 1
        self.total = max(0, self.total - 1)


def _normalized(host: str) -> str:
    """One spelling per address (an IPv4-mapped IPv6 peer counts as its IPv4 address)."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)
