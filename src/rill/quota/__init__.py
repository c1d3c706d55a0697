"""Client quotas (Kafka's ClientQuotaManager family): byte rates of produce and fetch, request time."""

from __future__ import annotations

from collections.abc import Callable

from rill.metadata.client_quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotas,
)
from rill.quota.client_quota_manager import ClientQuotaManager

__all__ = ["ClientQuotaManager", "QuotaManagers"]


class QuotaManagers:
    """Kafka's QuotaFactory.QuotaManagers: one manager per quota type, all reading the store's quotas."""

    def __init__(self, source: Callable[[], ClientQuotas], samples: int = 11, window_s: int = 1) -> None:
        self._source = source
        self._version = -1
        self._active = False
        self.produce = ClientQuotaManager("Produce", PRODUCER_BYTE_RATE, source, samples=samples, window_s=window_s)
        self.fetch = ClientQuotaManager("Fetch", CONSUMER_BYTE_RATE, source, samples=samples, window_s=window_s)
        self.request = ClientQuotaManager(
            "Request", REQUEST_PERCENTAGE, source, samples=samples, window_s=window_s, max_throttle_ms=window_s * 1000
        )

    @property
    def active(self) -> bool:
        """True when any quota of any type is set (else requests skip the quota path altogether)."""
        version = self._source().version
        if version != self._version:
            self._version = version
            self._active = any(m.enabled for m in self.all())
        return self._active

    def all(self) -> tuple[ClientQuotaManager, ...]:
        return self.produce, self.fetch, self.request
