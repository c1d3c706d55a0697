"""Byte-rate quotas measured with real clients: a client that wants 1.5 times its quota gets its quota, a client
without a quota beside it keeps its rate, and librdkafka reports the throttle times the broker sends.

Kafka's quota windows allow a burst at first (the quota times ``quota.window.num - 1`` windows, measured as if
spread over them), and the bytes of each window leave the measured span together, so a throttled client's rate
swings with the span's period (about ``quota.window.num`` windows). The rate is measured once the first burst
has left the span, over two such periods."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.quotas._quota_clients import MB, TimedConsumer, TimedProducer, alter_quotas

from rill.testing import broker

pytestmark = [pytest.mark.slow, pytest.mark.timing, pytest.mark.timeout(180)]

QUOTA = 5 * MB
SETTLE_S = 13.0  # the first burst has left the quota's span
MEASURE_S = 20.0  # about two periods of the span
FREE_LOAD = 40 * MB


def _topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def test_a_produce_quota_holds_its_client_to_the_rate_and_spares_the_others() -> None:
    with broker(subprocess=True) as b:
        bootstrap = b.bootstrap_servers
        _topic(bootstrap, "quota")
        _topic(bootstrap, "free")
        alter_quotas(bootstrap, {"client-id": "throttled"}, {"producer_byte_rate": float(QUOTA)})

        # The machine's two cores run the broker, both clients and whatever else: a client sending flat out
        # measures that, not the quota. The free client is given a load the machine carries with room to spare.
        free = TimedProducer(bootstrap, "free", "free", offered=FREE_LOAD)
        free.start()
        time.sleep(2.0)  # connected and at full speed
        alone_start = time.monotonic()
        time.sleep(4.0)
        alone_end = time.monotonic()

        throttled = TimedProducer(bootstrap, "quota", "throttled", offered=1.5 * QUOTA)
        throttled.start()
        time.sleep(SETTLE_S)
        start = time.monotonic()
        time.sleep(MEASURE_S)
        end = time.monotonic()
        beside_start = start
        throttled.stop()
        time.sleep(1.0)
        again_start = time.monotonic()
        time.sleep(4.0)
        again_end = time.monotonic()
        free.stop()

        rate = throttled.rate(start, end)
        alone = (free.rate(alone_start, alone_end) + free.rate(again_start, again_end)) / 2
        beside = free.rate(beside_start, end)
        print(f"throttled {rate / MB:.2f} MB/s; free alone {alone / MB:.1f} MB/s, beside {beside / MB:.1f} MB/s; "
              f"throttles reported {len(throttled.throttles)}")  # fmt: skip
        assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate / MB:.2f} MB/s under a 5 MB/s quota"
        assert abs(beside - alone) <= 0.1 * alone, (
            f"free producer {beside / MB:.1f} MB/s beside, {alone / MB:.1f} alone"
        )
        assert throttled.throttles and max(throttled.throttles) > 0
        assert not free.throttles


def test_a_fetch_quota_holds_its_consumer_to_the_rate() -> None:
    with broker(subprocess=True) as b:
        bootstrap = b.bootstrap_servers
        _topic(bootstrap, "data")
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.kbytes": 65536})
        payload = b"y" * (64 * 1024)
        for _ in range(4000):  # 262 MB: more than the consumer can take in the test
            while True:
                try:
                    p.produce("data", payload)
                    break
                except BufferError:
                    p.poll(0.05)
        assert p.flush(60) == 0
        alter_quotas(bootstrap, {"client-id": "reader"}, {"consumer_byte_rate": float(QUOTA)})

        reader = TimedConsumer(bootstrap, "data", "reader", offered=1.5 * QUOTA)
        reader.start()
        time.sleep(SETTLE_S)
        start = time.monotonic()
        time.sleep(MEASURE_S)
        end = time.monotonic()
        reader.stop()
        rate = reader.rate(start, end)
        print(f"consumer {rate / MB:.2f} MB/s, throttles reported {len(reader.throttles)}")
        assert abs(rate - QUOTA) <= 0.1 * QUOTA, f"{rate / MB:.2f} MB/s under a 5 MB/s quota"
        assert reader.throttles and max(reader.throttles) > 0
