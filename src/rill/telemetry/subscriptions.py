"""Client metrics subscriptions: the CLIENT_METRICS config resources (type 16) of KIP-714, as Kafka's
ClientMetricsConfigs defines them (no I/O).

A subscription names metric prefixes (``metrics``; ``*`` for every metric), a push interval (``interval.ms``,
100 ms to one hour, five minutes by default) and the clients it applies to (``match``: ``selector=regex``
pairs over ``client_instance_id``, ``client_id``, ``client_software_name``, ``client_software_version``,
``client_source_address`` and ``client_source_port``; each regex must match the whole value, and a
subscription without any applies to every client).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import re2

from rill.errors import ErrorCode, KafkaError

CLIENT_METRICS = 16
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 5 * 60 * 1000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
SELECTORS = (
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
)
CONFIG_DOCS = {
    METRICS: "Telemetry metric name prefix list",
    INTERVAL_MS: "Metrics push interval in milliseconds",
    MATCH: "Client match criteria",
}
CONFIG_DEFAULTS = {METRICS: "", INTERVAL_MS: str(DEFAULT_INTERVAL_MS), MATCH: ""}


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re2._Regexp], ...]

    def applies_to(self, client: Mapping[str, str]) -> bool:
        """Every selector's regex matches the client's whole value (a value the client did not give matches
        nothing)."""
        for selector, pattern in self.match:
            value = client.get(selector)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def _list(name: str, value: str) -> list[str]:
    items = [item.strip() for item in value.split(",")] if value.strip() else []
    if any(not item for item in items):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: empty entry")
    if len(set(items)) != len(items):
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: duplicates")
    return items


# RE2 matches in time linear in the value: a client chooses the values a subscription's regexes are matched
# against, on the event loop, and Python's backtracking `re` can take exponential time (Kafka uses RE2/J).
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def _pattern(entry: str) -> tuple[str, re2._Regexp]:
    selector, sep, regex = entry.partition("=")
    selector, regex = selector.strip(), regex.strip()
    if not sep or selector not in SELECTORS:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {entry}")
    try:
        return selector, re2.compile(regex, _RE2_OPTIONS)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Client match pattern `{selector}={regex}` is not a valid regular expression: {why}.",
        ) from None


def parse_subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """The subscription ``configs`` describe, checked as Kafka checks them: an empty name or an unknown config
    name or an interval out of bounds is INVALID_REQUEST, a value that does not parse INVALID_CONFIG."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in CONFIG_DEFAULTS:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    metrics = _list(METRICS, configs.get(METRICS, ""))
    raw_interval = configs.get(INTERVAL_MS, str(DEFAULT_INTERVAL_MS)).strip()
    try:
        interval = int(raw_interval)
    except ValueError:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG,
            f"Invalid value {raw_interval} for configuration {INTERVAL_MS}: Not a number of type INT",
        ) from None
    if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            f"Invalid value {interval} for {INTERVAL_MS}, interval must be "
            f"between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)",
        )
    match = tuple(_pattern(entry) for entry in _list(MATCH, configs.get(MATCH, "")))
    return Subscription(name, tuple(metrics), interval, match)


def parse_all(stored: Mapping[str, Mapping[str, str]]) -> list[Subscription]:
    """The subscriptions of the store, skipping (the caller logs) any that no longer parse."""
    out = []
    for name, configs in sorted(stored.items()):
        try:
            out.append(parse_subscription(name, configs))
        except KafkaError:
            continue
    return out
