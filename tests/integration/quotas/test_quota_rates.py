"""Byte-rate quotas measured with real clients: producers and consumers offered 1.5, 10 and 250 times their quota,
with small (1 KiB) and large (100 KB) records, get their quota over the run and over any 10 s after their first,
and a client without a quota beside them keeps its rate; librdkafka reports the throttle times the broker sends.

A new group may take its quota times ``quota.window.num - 1`` windows at once (10 s worth by default), and no more
in its first 10 s; from then on it gets its quota. Each client's rate is measured from its first record on: over
spans from there of ``SPAN_S`` and longer, and over every span of ``SPAN_S`` once its first has passed. Every
request is at most about 1 MB (librdkafka's batch and partition fetch sizes), a half second of the quota, so
over 10 s the rate is within a few percent of the quota whatever the requests' sizes."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.quotas._quota_clients import MB, TimedConsumer, TimedProducer, alter_quotas

from rill.testing import broker

pytestmark = [pytest.mark.slow, pytest.mark.timing, pytest.mark.timeout(180)]

QUOTA = 2 * MB
SPAN_S = 10.0
RUN_S = 22.0
TOLERANCE = 0.15
OFFERED = (1.5, 10.0, 250.0)
RECORD_SIZES = (1024, 100_000)
FREE_LOAD = 16 * MB


def _topics(bootstrap: str, names: Sequence[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1) for name in names]).values():
        future.result(30)


def _run(clients: Sequence[TimedProducer] | Sequence[TimedConsumer]) -> None:
    """Start the clients and let them run until each has had ``RUN_S`` from its first record."""
    for c in clients:
        c.start()
    deadline = time.monotonic() + RUN_S + 60
    while any(not _first(c) or time.monotonic() < _first(c) + RUN_S for c in clients):
        assert time.monotonic() < deadline, "a client got no record"
        time.sleep(0.1)


def _first(client: TimedProducer | TimedConsumer) -> float:
    """When the client's first record was delivered or received (0.0: none yet)."""
    records = client.deliveries if isinstance(client, TimedProducer) else client.received
    return records[0][0] if records else 0.0


def _check(kind: str, clients: dict[tuple[float, int], TimedProducer | TimedConsumer]) -> None:
    """Every client's rate over spans from its first record of SPAN_S to RUN_S, and over every span of SPAN_S
    after its first (a second apart), is within TOLERANCE of the quota."""
    rates: dict[tuple[float, int], list[float]] = {}
    for case, c in clients.items():
        t0 = _first(c) - 0.001
        spans = [(t0, t0 + length) for length in range(int(SPAN_S), int(RUN_S) + 1, 2)]
        spans += [(t0 + a, t0 + a + SPAN_S) for a in range(int(SPAN_S), int(RUN_S - SPAN_S) + 1)]
        rates[case] = [c.rate(a, b) for a, b in spans]
    report = ", ".join(f"{m:g}x {s} B: {min(r) / MB:.2f}-{max(r) / MB:.2f}" for (m, s), r in rates.items())
    print(f"{kind} under a {QUOTA / MB:g} MB/s quota (MB/s): {report}")
    off = [case for case, r in rates.items() if any(abs(x - QUOTA) > TOLERANCE * QUOTA for x in r)]
    assert not off, f"{kind} rates off the {QUOTA / MB:g} MB/s quota: {report}"


def test_produce_quotas_hold_every_offered_rate_and_record_size_and_spare_the_others() -> None:
    with broker(subprocess=True) as b:
        bootstrap = b.bootstrap_servers
        cases = [(m, s) for m in OFFERED for s in RECORD_SIZES]
        names = {case: f"p-{case[0]:g}x-{case[1]}" for case in cases}
        _topics(bootstrap, [*names.values(), "free"])
        for name in names.values():
            alter_quotas(bootstrap, {"client-id": name}, {"producer_byte_rate": float(QUOTA)})

        # The machine's two cores run the broker, every client and whatever else: a client sending flat out
        # measures that, not the quota. The free client is given a load the machine carries with room to spare.
        free = TimedProducer(bootstrap, "free", "free", payload=10_000, offered=FREE_LOAD)
        free.start()
        time.sleep(2.0)  # connected and at full speed
        alone_start = time.monotonic()
        time.sleep(3.0)
        alone_end = time.monotonic()

        producers = {
            case: TimedProducer(bootstrap, name, name, payload=case[1], offered=case[0] * QUOTA)
            for case, name in names.items()
        }
        _run(list(producers.values()))
        start, end = max(map(_first, producers.values())), time.monotonic()
        for p in producers.values():
            p.stop()
        time.sleep(1.0)
        again_start = time.monotonic()
        time.sleep(3.0)
        again_end = time.monotonic()
        free.stop()

        alone = (free.rate(alone_start, alone_end) + free.rate(again_start, again_end)) / 2
        beside = free.rate(start, end)
        print(f"free producer {alone / MB:.1f} MB/s alone, {beside / MB:.1f} MB/s beside")
        _check("producers", dict(producers))
        assert abs(beside - alone) <= 0.1 * alone, f"free producer {beside / MB:.1f} MB/s beside, {alone / MB:.1f}"
        assert all(max(p.throttles) > 0 for p in producers.values())
        assert not free.throttles


def test_fetch_quotas_hold_every_offered_rate_and_record_size() -> None:
    with broker(subprocess=True) as b:
        bootstrap = b.bootstrap_servers
        data = {size: f"data-{size}" for size in RECORD_SIZES}
        _topics(bootstrap, list(data.values()))
        # each topic holds more than a consumer can take in the test: RUN_S at the quota, and more
        needed = QUOTA * (RUN_S + 6)
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.kbytes": 65536})
        for size, topic in data.items():
            payload = b"y" * size
            for _ in range(int(needed // size) + 1):
                while True:
                    try:
                        p.produce(topic, payload)
                        break
                    except BufferError:
                        p.poll(0.05)
        assert p.flush(60) == 0
        del p  # its connections closed before the broker stops
        cases = [(m, s) for m in OFFERED for s in RECORD_SIZES]
        names = {case: f"c-{case[0]:g}x-{case[1]}" for case in cases}
        for name in names.values():
            alter_quotas(bootstrap, {"client-id": name}, {"consumer_byte_rate": float(QUOTA)})

        consumers = {
            case: TimedConsumer(bootstrap, data[case[1]], name, offered=case[0] * QUOTA) for case, name in names.items()
        }
        _run(list(consumers.values()))
        for c in consumers.values():
            c.stop()
        _check("consumers", dict(consumers))
        assert all(max(c.throttles) > 0 for c in consumers.values())
