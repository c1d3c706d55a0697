"""The broker's side of client telemetry (KIP-714), after Kafka's ClientMetricsManager.

A client asks GetTelemetrySubscriptions with a zero client instance id and is given one (a random UUID, never
zero nor a reserved one). Its instance is then matched against every subscription of the cluster (the
CLIENT_METRICS config resources, read from the metadata store): the union of the metric prefixes of those that
apply (``*`` for all), the smallest of their intervals (five minutes when none applies, with no metric asked
for: the client pushes nothing), and a subscription id, a CRC32C of that set and interval XORed with the
instance id's hash, so that every broker gives the same id for the same set. A change of the subscriptions makes
each instance be matched again at its next request.

Requests are paced by the push interval: a GetTelemetrySubscriptions sooner than one interval after the
instance's last request, or a PushTelemetry sooner than one interval after its last push (except the first
push after a GetTelemetrySubscriptions, and a terminating one), is THROTTLING_QUOTA_EXCEEDED. A push is also
refused, in this order, when the instance already terminated (INVALID_REQUEST), when its subscription id is
not the current one (UNKNOWN_SUBSCRIPTION_ID; the client then asks again, which is not throttled), when its
compression type is unknown (UNSUPPORTED_COMPRESSION_TYPE), when it is larger than ``telemetry.max.bytes``
(TELEMETRY_TOO_LARGE), and when its metrics do not decode (INVALID_RECORD). A refused push changes nothing.

An instance not heard from for three push intervals (at least a minute) expires, and its pushed series with it.
At most 16384 instances are held, keeping at most 32 Mi characters of their clients' attributes together (a
client id may be 32 KB, a software name as long as a request, and an instance outlives its connection); the
least recently heard from goes first.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from crc32c_rs import crc32c

from rill.errors import ErrorCode, KafkaError
from rill.telemetry.pushed_metrics import Point, PushedMetrics, decode_payload
from rill.telemetry.subscriptions import ALL_METRICS, DEFAULT_INTERVAL_MS, Subscription, parse_subscription

log = logging.getLogger(__name__)

# Kafka's order of preference (a client takes the first it supports); NONE (0) is accepted as well.
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)  # zstd, lz4, gzip, snappy
KNOWN_COMPRESSION_TYPES = frozenset({0, 1, 2, 3, 4})
MAX_INSTANCES = 16384
MAX_INSTANCE_CHARS = 32 << 20  # what the instances held keep of their clients (attribute characters), together
MIN_EXPIRY_MS = 60_000
RESERVED_IDS = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})  # Kafka's ZERO_UUID and METADATA_TOPIC_ID


def java_uuid_hash(u: uuid.UUID) -> int:
    """Kafka's ``Uuid.hashCode``: the two halves XORed, then the two 32-bit halves of that."""
    h = (u.int >> 64) ^ (u.int & (2**64 - 1))
    return ((h >> 32) ^ h) & 0xFFFFFFFF


def subscription_id(metrics: tuple[str, ...], interval_ms: int, instance_id: uuid.UUID) -> int:
    text = "[" + ", ".join(metrics) + "]" + str(interval_ms)
    unsigned = crc32c(text.encode()) ^ java_uuid_hash(instance_id)
    return unsigned - 2**32 if unsigned >= 2**31 else unsigned


@dataclass(slots=True)
class ClientInstance:
    instance_id: uuid.UUID
    attributes: dict[str, str]  # the values the subscriptions' ``match`` selectors are matched against
    version: int  # of the subscriptions it was matched against
    metrics: tuple[str, ...]
    interval_ms: int
    subscription_id: int
    last_get: float = float("-inf")  # monotonic ms
    last_push: float = float("-inf")
    last_seen: float = float("-inf")
    terminating: bool = False
    last_error: int = 0


def _chars(instance: ClientInstance) -> int:
    return sum(len(value) for value in instance.attributes.values())


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """Who sent a telemetry request: what the subscriptions' selectors match against."""

    client_id: str
    software_name: str
    software_version: str
    address: str
    port: int

    def attributes(self, instance_id: uuid.UUID) -> dict[str, str]:
        out = {
            "client_instance_id": str(instance_id),
            "client_id": self.client_id,
            "client_source_address": self.address,
            "client_source_port": str(self.port),
        }
        if self.software_name:
            out["client_software_name"] = self.software_name
        if self.software_version:
            out["client_software_version"] = self.software_version
        return out


class ClientMetricsManager:
    def __init__(
        self,
        subscriptions: Callable[[], Mapping[str, Mapping[str, str]]],
        max_bytes: int,
        pushed: PushedMetrics,
    ) -> None:
        self._stored = subscriptions
        self.max_bytes = max_bytes
        self.pushed = pushed
        self._seen: dict[str, dict[str, str]] = {}
        self._subscriptions: list[Subscription] = []
        self._version = 0
        self.instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self.held_chars = 0  # the instances' attribute characters, together (at most MAX_INSTANCE_CHARS)
        self._last_sweep = float("-inf")
        self.exporting = False  # set once the Prometheus endpoint reads the pushed series
        self.counts = {"throttle": 0, "unknown_subscription_request": 0, "plugin_export": 0, "plugin_error": 0}

    # -- subscriptions -------------------------------------------------------------------------------------

    def _refresh(self) -> None:
        stored = self._stored()
        if stored == self._seen:
            return
        self._seen = {name: dict(configs) for name, configs in stored.items()}
        parsed = []
        for name, configs in sorted(self._seen.items()):
            try:
                parsed.append(parse_subscription(name, configs))
            except KafkaError as e:
                log.error("skipped the client metrics subscription %s: %s", name, e.message)
        self._subscriptions = parsed
        self._version += 1

    def _match(self, instance_id: uuid.UUID, attributes: dict[str, str]) -> ClientInstance:
        metrics: set[str] = set()
        interval = DEFAULT_INTERVAL_MS
        every = False
        for sub in self._subscriptions:
            if sub.applies_to(attributes):
                every = every or ALL_METRICS in sub.metrics
                metrics.update(sub.metrics)
                interval = min(interval, sub.interval_ms)
        chosen = (ALL_METRICS,) if every else tuple(sorted(metrics))
        sid = subscription_id(chosen, interval, instance_id)
        return ClientInstance(instance_id, attributes, self._version, chosen, interval, sid)

    def _instance(self, instance_id: uuid.UUID, client: ClientInfo, now: float) -> ClientInstance:
        self._refresh()
        self._expire(now)
        instance = self.instances.get(instance_id)
        if instance is None:
            instance = self._match(instance_id, client.attributes(instance_id))
            size = _chars(instance)
            while self.instances and (
                len(self.instances) >= MAX_INSTANCES or self.held_chars + size > MAX_INSTANCE_CHARS
            ):
                self._drop(next(iter(self.instances)))
            self.held_chars += size
        elif instance.version != self._version:
            instance = self._match(instance_id, instance.attributes)
        self.instances[instance_id] = instance
        self.instances.move_to_end(instance_id)
        instance.last_seen = now
        self.pushed.seen(str(instance_id), self._expiry(instance))
        return instance

    @staticmethod
    def _expiry(instance: ClientInstance) -> float:
        return instance.last_seen + max(MIN_EXPIRY_MS, 3 * instance.interval_ms)

    def _expire(self, now: float) -> None:
        """Drop the instances (and their series) that expired; a scan at most once a second."""
        if now - self._last_sweep < 1000:
            return
        self._last_sweep = now
        for gone in [i for i in self.instances.values() if now >= self._expiry(i)]:
            self._drop(gone.instance_id)

    def _drop(self, instance_id: uuid.UUID) -> None:
        gone = self.instances.pop(instance_id)
        self.held_chars -= _chars(gone)
        self.pushed.forget(str(instance_id))

    # -- requests ------------------------------------------------------------------------------------------

    def get_subscriptions(self, requested: uuid.UUID, client: ClientInfo) -> dict[str, object]:
        now = self.pushed.clock_ms()
        instance_id = requested
        if instance_id == uuid.UUID(int=0):
            instance_id = uuid.uuid4()
            while instance_id in self.instances or instance_id in RESERVED_IDS:
                instance_id = uuid.uuid4()
        instance = self._instance(instance_id, client, now)
        waited = now - max(instance.last_get, instance.last_push)
        after_error = instance.last_error in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
        if waited < instance.interval_ms and not after_error:
            self.counts["throttle"] += 1
            return {"error_code": ErrorCode.THROTTLING_QUOTA_EXCEEDED}
        instance.last_get = now
        instance.last_error = 0
        return {
            "error_code": 0,
            "client_instance_id": instance_id,
            "subscription_id": instance.subscription_id,
            "accepted_compression_types": list(ACCEPTED_COMPRESSION_TYPES),
            "push_interval_ms": instance.interval_ms,
            "telemetry_max_bytes": self.max_bytes,
            "delta_temporality": True,
            "requested_metrics": list(instance.metrics),
        }

    def push(self, request: Mapping[str, object], client: ClientInfo) -> int:
        """The error code of a PushTelemetry (0: taken)."""
        instance_id = request["client_instance_id"]
        if not isinstance(instance_id, uuid.UUID) or instance_id in RESERVED_IDS:
            return ErrorCode.INVALID_REQUEST
        now = self.pushed.clock_ms()
        instance = self._instance(instance_id, client, now)
        try:
            points = self._check_push(instance, request, now)
        except KafkaError as e:
            log.debug("refused a telemetry push of client %s: %s", instance_id, e.message)
            instance.last_error = e.code
            return e.code
        instance.last_push = now
        instance.terminating = bool(request["terminating"])
        instance.last_error = 0
        if points is not None:
            self.counts["plugin_export"] += 1
            if self.exporting:
                self.pushed.record(str(instance_id), points, self._expiry(instance))
        return 0

    def _check_push(self, instance: ClientInstance, request: Mapping[str, object], now: float) -> list[Point] | None:
        if instance.terminating:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "the client already sent a terminating push")
        first_after_get = instance.last_get > instance.last_push
        if not first_after_get and now - instance.last_push < instance.interval_ms and not request["terminating"]:
            self.counts["throttle"] += 1
            raise KafkaError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "pushed before the next push interval")
        if request["subscription_id"] != instance.subscription_id:
            self.counts["unknown_subscription_request"] += 1
            raise KafkaError(ErrorCode.UNKNOWN_SUBSCRIPTION_ID, "unknown client subscription id")
        compression = request["compression_type"]
        if compression not in KNOWN_COMPRESSION_TYPES:
            raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown compression type {compression}")
        payload = request["metrics"]
        assert isinstance(payload, (bytes, bytearray, memoryview)) and isinstance(compression, int)
        if len(payload) > self.max_bytes:
            raise KafkaError(ErrorCode.TELEMETRY_TOO_LARGE, f"larger than telemetry.max.bytes ({self.max_bytes})")
        if not len(payload):
            return None
        try:
            return decode_payload(compression, bytes(payload), self.max_bytes, self.pushed.max_series)
        except KafkaError:
            self.counts["plugin_error"] += 1
            raise
