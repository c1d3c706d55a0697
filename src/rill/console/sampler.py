"""Figures over time for the console's charts, kept in memory for the last ``HISTORY`` samples only (a restart
starts them afresh; the console stores nothing).

- Throughput and latency, from the brokers' Prometheus endpoints (``--metrics URL ...``), scraped every
  ``interval_s``: produce bytes/s (``kafka_server_brokertopicmetrics_bytesin_total``), consume bytes/s
  (``..._bytesout_total``), requests/s and the mean request time (``kafka_network_requestmetrics_*``),
  summed over the brokers that answered. Any Kafka exporter with Kafka's names works.
- Consumer lag, per group and per session: sampled with the identity of the session that views a group's
  page, then every ``interval_s`` while that session viewed it in the last ``LAG_KEEP_S``; a session sees
  only the history its own identity sampled (the cluster's ACLs decide, as for the page). At most
  ``MAX_LAG_WATCHED`` histories are kept (the least recently viewed goes first); one is dropped once
  ``LAG_KEEP_S`` passed since its last view, or when its session signs out.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

HISTORY = 360
LAG_KEEP_S = 600.0
MAX_LAG_WATCHED = 64
LagKey = tuple[str, str]  # (session id, group id)


@dataclass(frozen=True)
class Point:
    t: float
    bytes_in: float
    bytes_out: float
    requests: float
    mean_request_ms: float


def _totals(text: str) -> dict[str, float]:
    out = {"in": 0.0, "out": 0.0, "requests": 0.0, "time_sum": 0.0, "time_count": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name == "kafka_server_brokertopicmetrics_bytesin_total":
                out["in"] += sample.value
            elif name == "kafka_server_brokertopicmetrics_bytesout_total":
                out["out"] += sample.value
            elif name == "kafka_network_requestmetrics_requests_total":
                out["requests"] += sample.value
            elif name == "kafka_network_requestmetrics_totaltime_seconds_sum":
                out["time_sum"] += sample.value
            elif name == "kafka_network_requestmetrics_totaltime_seconds_count":
                out["time_count"] += sample.value
    return out


class Sampler:
    def __init__(self, metrics_urls: list[str], interval_s: float = 5.0) -> None:
        self.urls = metrics_urls
        self.interval_s = interval_s
        self.points: collections.deque[Point] = collections.deque(maxlen=HISTORY)
        self.lag: dict[LagKey, collections.deque[tuple[float, dict[str, int]]]] = {}
        self._lag_sources: dict[LagKey, tuple[float, Callable[[], dict[str, int]]]] = {}
        self._last: dict[str, float] | None = None
        self._last_t = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def watch_lag(self, key: LagKey, source: Callable[[], dict[str, int]]) -> None:
        """Sample ``source`` (partition -> lag) for ``key`` (session, group) now and for a while."""
        with self._lock:
            self._lag_sources.pop(key, None)
            self._lag_sources[key] = (time.monotonic(), source)  # the most recently viewed last
            while len(self._lag_sources) > MAX_LAG_WATCHED:
                oldest = next(iter(self._lag_sources))
                del self._lag_sources[oldest]
                self.lag.pop(oldest, None)
        self._sample_lag(key, source)

    def lag_history(self, key: LagKey) -> list[tuple[float, dict[str, int]]]:
        with self._lock:
            return list(self.lag.get(key, ()))

    def forget(self, session_id: str) -> None:
        """Stop sampling for a session that signed out, and drop its histories."""
        with self._lock:
            for key in [k for k in self._lag_sources if k[0] == session_id]:
                del self._lag_sources[key]
                self.lag.pop(key, None)

    def history(self) -> list[Point]:
        with self._lock:
            return list(self.points)

    def _sample_lag(self, key: LagKey, source: Callable[[], dict[str, int]]) -> None:
        try:
            lag = source()
        except Exception as e:
            log.debug("lag of %s: %s", key[1], e)
            return
        with self._lock:
            if key in self._lag_sources:  # not forgotten meanwhile
                self.lag.setdefault(key, collections.deque(maxlen=HISTORY)).append((time.time(), lag))

    def _scrape(self) -> None:
        totals = {"in": 0.0, "out": 0.0, "requests": 0.0, "time_sum": 0.0, "time_count": 0.0}
        answered = 0
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=3) as r:
                    for k, v in _totals(r.read().decode("utf-8", "replace")).items():
                        totals[k] += v
                answered += 1
            except (OSError, ValueError) as e:
                log.debug("metrics %s: %s", url, e)
        now = time.time()
        if answered and self._last is not None and now > self._last_t:
            dt, last = now - self._last_t, self._last
            count = totals["time_count"] - last["time_count"]
            point = Point(now, max(0.0, (totals["in"] - last["in"]) / dt), max(0.0, (totals["out"] - last["out"]) / dt),
                          max(0.0, (totals["requests"] - last["requests"]) / dt),
                          (totals["time_sum"] - last["time_sum"]) / count * 1000 if count > 0 else 0.0)  # fmt: skip
            with self._lock:
                self.points.append(point)
        if answered:
            self._last, self._last_t = totals, now

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.urls:
                self._scrape()
            with self._lock:
                now = time.monotonic()
                for key in [k for k, (seen, _) in self._lag_sources.items() if now - seen >= LAG_KEEP_S]:
                    del self._lag_sources[key]
                    self.lag.pop(key, None)
                sources = [(k, s) for k, (_, s) in self._lag_sources.items()]
            for key, source in sources:
                self._sample_lag(key, source)
            self._stop.wait(self.interval_s)
