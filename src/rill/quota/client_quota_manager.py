"""Kafka's ClientQuotaManager: one per quota type (produce bytes, fetch bytes, request time), grouping clients by
(user, client-id) and measuring each group's rate against the quota that applies to it.

Which quota applies (the first level that holds this manager's quota key, Kafka's order):

    1. /config/users/<user>/clients/<client-id>      5. /config/users/<default>/clients/<default>
    2. /config/users/<user>/clients/<default>        6. /config/users/<default>
    3. /config/users/<user>                          7. /config/clients/<client-id>
    4. /config/users/<default>/clients/<client-id>   8. /config/clients/<default>

The level decides the group (the metric tags) as well: a quota at ``/config/users/<user>`` is shared by every
client id of that user (tags ``user=<user>, client-id=""``), one at ``/config/clients/<client-id>`` by every user
of that client id. A manager with no quota of its type anywhere records nothing. Quota changes take effect at the
next request: the store's quotas carry a version, and a new one has every group's limit worked out again (a
group whose limit changed starts afresh under it).

A group's rate (its metric) is a :class:`~rill.quota.rate.Rate` over ``quota.window.num`` windows of
``quota.window.size.seconds``. It is held to its quota by a :class:`~rill.quota.rate.TokenBucket` of the quota
times ``quota.window.num - 1`` windows, at least one (what Kafka's rate lets a new group send at once, and the
most a fetch asks for), made when the group is first recorded under a quota: a value that takes the credits below zero
gives the time they take to refill to zero as the throttle time (the request quota's bounded by one window).
A windowed rate forgets a burst all at once, so a client throttled by it would get its quota in waves a span
apart (see ``rate``); the bucket holds it to the quota whatever its requests' sizes. Groups unused for an hour
are forgotten, as Kafka expires inactive sensors.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rill.metadata.client_quotas import DEFAULT, ClientQuotas, QuotaEntity
from rill.quota.rate import Avg, Rate, TokenBucket

INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000
_CLIENT_ID, _USER, _USER_CLIENT_ID = 1, 2, 4  # Kafka's QuotaTypes, as bits


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class ClientSensors:
    """One quota group: its tags, its rate, its throttle times, and the quota in force (None: none)."""

    user: str
    client_id: str
    rate: Rate
    limit: float | None
    bucket: TokenBucket | None = None  # made when the group is first recorded under a quota
    throttle_time: Avg = field(default_factory=Avg)
    last_used_ms: int = 0


class ClientQuotaManager:
    def __init__(
        self,
        quota_type: str,
        quota_key: str,
        source: Callable[[], ClientQuotas],
        *,
        samples: int = 11,
        window_s: int = 1,
        max_throttle_ms: int | None = None,
    ) -> None:
        self.quota_type = quota_type  # Kafka's metric group: Produce, Fetch, Request
        self.quota_key = quota_key
        self._source = source
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self._version = -1
        self._overridden: dict[QuotaEntity, float] = {}
        self._types = 0
        self._by_client: dict[tuple[str, str], ClientSensors] = {}
        self.sensors: dict[tuple[str, str], ClientSensors] = {}  # by (user, client-id) tags
        self._next_expiry_ms = 0

    # -- the quotas in force ---------------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        self._refresh()
        return self._types != 0

    def _refresh(self) -> None:
        quotas = self._source()
        if quotas.version == self._version:
            return
        self._version = quotas.version
        key = self.quota_key
        self._overridden = {entity: values[key] for entity, values in quotas if key in values}
        types = 0
        for e in self._overridden:
            if e.user is not None and e.client_id is not None:
                types |= _USER_CLIENT_ID
            else:
                types |= _USER if e.user is not None else _CLIENT_ID
        self._types = types
        self._by_client.clear()
        for tags, sensors in self.sensors.items():
            limit = self.quota_limit(*tags)
            if limit != sensors.limit:
                sensors.limit, sensors.bucket = limit, None  # the group starts afresh under its new quota

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The quota group of a client (Kafka's DefaultQuotaCallback.quotaMetricTags): (user, client-id) tags."""
        types = self._types
        if types in (0, _CLIENT_ID):
            return "", client_id
        if types == _USER:
            return user, ""
        if types == _USER_CLIENT_ID:
            return user, client_id
        has = self._overridden.__contains__
        if has(QuotaEntity(user, client_id)) or has(QuotaEntity(user, DEFAULT)):
            return user, client_id
        if has(QuotaEntity(user, None)):
            return user, ""
        if has(QuotaEntity(DEFAULT, client_id)) or has(QuotaEntity(DEFAULT, DEFAULT)):
            return user, client_id
        if has(QuotaEntity(DEFAULT, None)):
            return user, ""
        return "", client_id

    def quota_limit(self, user: str, client_id: str) -> float | None:
        """The quota of a group given by its tags (Kafka's DefaultQuotaCallback.quotaLimit), None for none."""
        get = self._overridden.get
        if user and client_id:
            for entity in (
                QuotaEntity(user, client_id),
                QuotaEntity(user, DEFAULT),
                QuotaEntity(DEFAULT, client_id),
                QuotaEntity(DEFAULT, DEFAULT),
            ):
                quota = get(entity)
                if quota is not None:
                    return quota
            return None
        if user:
            quota = get(QuotaEntity(user, None))
            return quota if quota is not None else get(QuotaEntity(DEFAULT, None))
        if client_id:
            quota = get(QuotaEntity(None, client_id))
            return quota if quota is not None else get(QuotaEntity(None, DEFAULT))
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        """The quota that applies to a client (``user`` sanitized), None when none does."""
        self._refresh()
        return self.quota_limit(*self.metric_tags(user, client_id))

    # -- recording -------------------------------------------------------------------------------------------

    def sensors_for(self, user: str, client_id: str, now: int) -> ClientSensors:
        self._refresh()
        sensors = self._by_client.get((user, client_id))
        if sensors is None:
            tags = self.metric_tags(user, client_id)
            sensors = self.sensors.get(tags)
            if sensors is None:
                sensors = self.sensors[tags] = ClientSensors(
                    tags[0], tags[1], Rate(self.samples, self.window_ms), self.quota_limit(*tags)
                )
            self._by_client[(user, client_id)] = sensors
        sensors.last_used_ms = now
        if now >= self._next_expiry_ms:
            self._expire(now)
        return sensors

    def record_and_get_throttle_ms(self, user: str, client_id: str, value: float, now: int | None = None) -> int:
        """Record ``value`` for the client's group; the throttle time when the group is now above its quota."""
        now = now_ms() if now is None else now
        sensors = self.sensors_for(user, client_id, now)
        sensors.rate.record(value, now)
        limit = sensors.limit
        if limit is None:
            return 0
        bucket = sensors.bucket
        if bucket is None:
            bucket = sensors.bucket = TokenBucket(max(self.samples - 1, 1) * self.window_ms, now)
        bucket.record(value, limit, now)
        throttle = bucket.throttle_ms(limit, now)
        return throttle if self.max_throttle_ms is None else min(throttle, self.max_throttle_ms)

    def maybe_record_and_get_throttle_ms(self, user: str, client_id: str, value: float) -> int:
        return self.record_and_get_throttle_ms(user, client_id, value) if self.enabled else 0

    def unrecord(self, user: str, client_id: str, value: float, now: int | None = None) -> None:
        """Take back a recorded value (a throttled fetch is answered empty)."""
        now = now_ms() if now is None else now
        sensors = self.sensors_for(user, client_id, now)
        sensors.rate.record(-value, now)
        if sensors.limit is not None and sensors.bucket is not None:
            sensors.bucket.record(-value, sensors.limit, now)

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most that can be recorded at once without a throttle for certain (caps a consumer's fetch)."""
        if not self.enabled:
            return float("inf")
        limit = self.quota(user, client_id)
        if limit is None:
            return float("inf")
        return limit * (self.samples - 1) * self.window_ms / 1000.0

    def throttle(self, user: str, client_id: str, throttle_ms: int, now: int | None = None) -> None:
        """Count a throttle of the client's group (the connection is muted by the network layer)."""
        if throttle_ms > 0:
            now = now_ms() if now is None else now
            self.sensors_for(user, client_id, now).throttle_time.record(throttle_ms, now)

    def _expire(self, now: int) -> None:
        self._next_expiry_ms = now + 60_000
        stale = [tags for tags, s in self.sensors.items() if now - s.last_used_ms >= INACTIVE_SENSOR_EXPIRATION_MS]
        for tags in stale:
            del self.sensors[tags]
        if stale:
            self._by_client.clear()
