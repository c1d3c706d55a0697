"""The quota arithmetic (Kafka's SampledStat/Rate windows, throttle time) and the entity precedence order."""

from __future__ import annotations

import pytest

from rill.errors import ErrorCode, KafkaError
from rill.metadata.client_quotas import (
    DEFAULT,
    ClientQuotas,
    QuotaEntity,
    check_quota_value,
    entity_from_components,
    sanitize,
)
from rill.quota import QuotaManagers
from rill.quota.client_quota_manager import ClientQuotaManager
from rill.quota.rate import Rate, TokenBucket, throttle_time_ms


def test_the_window_is_never_shorter_than_samples_minus_one_windows() -> None:
    rate = Rate(11, 1000)
    rate.record(1000, 0)
    assert rate.window_size_ms(0) == 10_000  # 0 elapsed + 10 whole windows
    assert rate.measure(0) == pytest.approx(100.0)
    assert rate.window_size_ms(500) == 10_500
    assert rate.measure(500) == pytest.approx(1000 / 10.5)


def test_the_window_spans_from_the_oldest_sample_once_enough_time_passed() -> None:
    rate = Rate(11, 1000)
    for t in range(0, 15_000, 100):  # 10 units every 100 ms: 100 per second
        rate.record(10, t)
    now = 14_950
    # 12 slots of one second hold the windows from 3000 ms; the one of 3000 ms had its last event at 3900 ms,
    # 11 windows before now, so it is purged: the oldest kept window started at 4000 ms
    assert rate.window_size_ms(now) == now - 4000
    assert rate.measure(now) == pytest.approx(10 * 110 / ((now - 4000) / 1000), rel=1e-9)
    assert rate.measure(now) == pytest.approx(100, rel=0.01)


def test_windows_without_events_for_samples_times_window_are_purged() -> None:
    rate = Rate(11, 1000)
    rate.record(5000, 0)
    assert rate.measure(10_999) > 0
    assert rate.measure(11_000) == 0.0  # its last event is 11 windows old
    rate.record(100, 11_000)
    assert rate.measure(11_000) == pytest.approx(10.0)


def test_an_unrecorded_value_takes_the_rate_back() -> None:
    rate = Rate(11, 1000)
    rate.record(700, 0)
    rate.record(300, 10)
    rate.record(-300, 20)
    assert rate.measure(20) == pytest.approx(700 / 10.02)


def test_throttle_time_brings_the_rate_back_to_the_bound() -> None:
    # O * W / (W + X) = T  =>  X = (O - T) / T * W
    assert throttle_time_ms(200.0, 100.0, 10_000) == 10_000
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5_000
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0
    assert throttle_time_ms(100.0005, 100.0, 1000) == 0  # rounds half up, as Java's Math.round
    assert throttle_time_ms(100.05, 100.0, 10_000) == 5


def _quotas(entries: dict[QuotaEntity, dict[str, float]]) -> ClientQuotas:
    q = ClientQuotas()
    q.apply(dict(entries))  # type: ignore[arg-type]
    return q


def _manager(
    q: ClientQuotas, key: str = "producer_byte_rate", max_throttle_ms: int | None = None
) -> ClientQuotaManager:
    return ClientQuotaManager("Produce", key, lambda: q, samples=11, window_s=1, max_throttle_ms=max_throttle_ms)


P = "producer_byte_rate"
LEVELS = [
    QuotaEntity("alice", "app"),
    QuotaEntity("alice", DEFAULT),
    QuotaEntity("alice", None),
    QuotaEntity(DEFAULT, "app"),
    QuotaEntity(DEFAULT, DEFAULT),
    QuotaEntity(DEFAULT, None),
    QuotaEntity(None, "app"),
    QuotaEntity(None, DEFAULT),
]


def test_the_eight_levels_apply_in_kafkas_order() -> None:
    """With every level set, each one wins once the levels above it are removed."""
    for i, level in enumerate(LEVELS):
        q = _quotas({e: {P: float(100 * (j + 1))} for j, e in enumerate(LEVELS) if j >= i})
        assert _manager(q).quota("alice", "app") == 100 * (i + 1), level.path


def test_the_level_decides_the_group() -> None:
    q = _quotas({QuotaEntity("alice", None): {P: 1000.0}, QuotaEntity(None, "app"): {P: 10.0}})
    m = _manager(q)
    assert m.enabled
    assert m.metric_tags("alice", "app") == ("alice", "")  # every client of alice shares one quota
    assert m.metric_tags("alice", "other") == ("alice", "")
    assert m.metric_tags("bob", "app") == ("", "app")  # bob falls through to the client id level
    assert m.quota("bob", "app") == 10.0
    assert m.quota("bob", "other") is None
    # a user quota alone groups by user, and a user without one has no quota
    only_user = _manager(_quotas({QuotaEntity("alice", None): {P: 1000.0}}))
    assert only_user.enabled
    assert only_user.metric_tags("bob", "x") == ("bob", "")
    assert only_user.quota("bob", "x") is None


def test_quotas_are_per_key() -> None:
    q = _quotas({QuotaEntity(None, "app"): {"consumer_byte_rate": 5.0}})
    assert not _manager(q, P).enabled
    assert _manager(q, "consumer_byte_rate").quota("ANONYMOUS", "app") == 5.0


def test_a_group_over_its_quota_is_throttled_and_a_change_applies_at_once() -> None:
    q = _quotas({QuotaEntity(None, "app"): {P: 1000.0}})
    m = _manager(q)
    assert m.record_and_get_throttle_ms("u", "app", 10_000, now=0) == 0  # 1000/s over 10 s, at once
    assert m.record_and_get_throttle_ms("u", "other", 1_000_000, now=0) == 0  # no quota for other
    # the rest of its first 10 s, then 5000 at 1000/s
    assert m.record_and_get_throttle_ms("u", "app", 5_000, now=100) == 9_900 + 5_000
    q.apply({QuotaEntity(None, "app"): {P: 100_000.0}})  # the group starts afresh under its new quota
    assert m.record_and_get_throttle_ms("u", "app", 1_000_000, now=200) == 0
    assert m.record_and_get_throttle_ms("u", "app", 1_000, now=200) == 10_010
    q.apply({QuotaEntity(None, "app"): {P: None}})
    assert not m.enabled


def test_the_request_quota_throttle_is_bounded_by_one_window() -> None:
    q = _quotas({QuotaEntity(DEFAULT, None): {"request_percentage": 1.0}})
    managers = QuotaManagers(lambda: q)
    assert managers.active
    assert managers.request.record_and_get_throttle_ms("u", "c", 10_000.0, now=0) == 1000


def test_a_fetch_may_take_the_quota_of_all_but_one_window_at_once() -> None:
    q = _quotas({QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 1000.0}})
    assert _manager(q, "consumer_byte_rate").max_value_in_quota_window("u", "c") == 10_000.0
    assert _manager(q, P).max_value_in_quota_window("u", "c") == float("inf")


def test_entities_and_values_are_checked_as_kafka_checks_them() -> None:
    def code(components: list[dict[str, str | None]]) -> ErrorCode | None:
        try:
            entity_from_components(components)
        except KafkaError as e:
            return e.code
        return None

    assert code([]) == ErrorCode.INVALID_REQUEST
    assert code([{"entity_type": "topic", "entity_name": "t"}]) == ErrorCode.INVALID_REQUEST
    assert code([{"entity_type": "user", "entity_name": ""}]) == ErrorCode.INVALID_REQUEST
    assert code([{"entity_type": "user", "entity_name": "a"}, {"entity_type": "user", "entity_name": "b"}])
    assert entity_from_components([{"entity_type": "user", "entity_name": None}]) == QuotaEntity(DEFAULT, None)
    assert entity_from_components([{"entity_type": "client-id", "entity_name": "<default>"}]) == QuotaEntity(
        None, "%3Cdefault%3E"
    )
    assert check_quota_value("producer_byte_rate", 1024.0) == 1024.0
    assert check_quota_value("request_percentage", 12.5) == 12.5
    for key, value in (("producer_byte_rate", 1.5), ("consumer_byte_rate", 0.0), ("request_percentage", -1.0),
                       ("nope", 1.0), ("request_percentage", float("nan"))):  # fmt: skip
        with pytest.raises(KafkaError) as err:
            check_quota_value(key, value)
        assert err.value.code == ErrorCode.INVALID_REQUEST


def test_names_are_sanitized_as_kafka_sanitizes_them() -> None:
    assert sanitize("User one*~") == "User%20one%2A%7E"
    assert sanitize("CN=a,O=b") == "CN%3Da%2CO%3Db"
    e = QuotaEntity(sanitize("a/b"), DEFAULT)
    assert QuotaEntity.from_path(e.path) == e
    q = _quotas({e: {P: 5.0}})
    assert ClientQuotas.from_json(q.to_json()).get(e) == {P: 5.0}


def test_a_new_token_bucket_gives_its_burst_at_once_and_no_more_in_its_first_burst_span() -> None:
    bucket = TokenBucket(10_000, 0)
    assert bucket.throttle_ms(100.0, 0) == 0
    bucket.record(1000.0, 100.0, 0)  # the whole burst: 100/s over 10 s
    assert bucket.credits == 0.0 and bucket.throttle_ms(100.0, 0) == 0
    assert bucket.throttle_ms(100.0, 5000) == 0 and bucket.credits == 0.0  # no refill in the first 10 s
    bucket.record(50.0, 100.0, 5000)
    assert bucket.throttle_ms(100.0, 5000) == 5500  # the 5 s left of the first span, then 50 at 100/s
    assert bucket.throttle_ms(100.0, 10_200) == 300
    assert bucket.throttle_ms(100.0, 10_500) == 0


def test_a_token_bucket_refills_at_the_bound_up_to_its_burst_and_gives_back_no_more() -> None:
    bucket = TokenBucket(10_000, -10_000)  # its first span is over
    bucket.record(1050.0, 100.0, 0)
    assert bucket.throttle_ms(100.0, 0) == 500
    assert bucket.throttle_ms(100.0, 200) == 300
    bucket.record(-2000.0, 100.0, 200)  # given back: never above the burst
    assert bucket.credits == 1000.0
    assert bucket.throttle_ms(100.0, 60_000) == 0 and bucket.credits == 1000.0  # quiet: full, no more
    bucket.record(1500.0, 200.0, 60_000)  # a higher bound: a larger burst, a faster refill
    assert bucket.throttle_ms(200.0, 60_000) == 2500
    assert bucket.throttle_ms(200.0, 62_500) == 0
    bucket.record(0.0, 50.0, 62_500)  # a lower bound: the credits above its burst are dropped
    assert bucket.credits == pytest.approx(0.0)


def _muted_client(request_bytes: int, quota: float, run_ms: int) -> list[tuple[int, int]]:
    """A client that always has a request of ``request_bytes`` ready, muted for each throttle time it gets (1 ms a
    round trip): the times and sizes of the requests the quota took."""
    m = _manager(_quotas({QuotaEntity(None, "app"): {P: quota}}))
    sent: list[tuple[int, int]] = []
    now = 0
    while now < run_ms:
        sent.append((now, request_bytes))
        now += 1 + m.record_and_get_throttle_ms("u", "app", request_bytes, now=now)
    return sent


@pytest.mark.parametrize("request_bytes", [10_000, 100_000, 1_000_000])
def test_a_throttled_client_gets_its_quota_over_any_ten_seconds(request_bytes: int) -> None:
    """A windowed rate forgets the first burst all at once, 11 windows after it, and the client gets as much
    again at once: over some 10 s it had twice its quota and over others a fifth. The bucket holds it, from its
    first request on (its burst counts in its first 10 s)."""
    quota = 2_000_000.0
    sent = _muted_client(request_bytes, quota, 60_000)
    first_wait = next(i for i in range(1, len(sent)) if sent[i][0] - sent[i - 1][0] > 1)
    assert sum(n for _, n in sent[:first_wait]) >= 10 * quota  # its burst, back to back
    spans = [(0, end) for end in range(10_000, 50_001, 500)]  # from its start
    spans += [(start, start + 10_000) for start in range(10_000, 50_000, 500)]  # any 10 s after its first
    rates = [sum(n for t, n in sent if start <= t < end) / ((end - start) / 1000) for start, end in spans]
    assert all(abs(r - quota) <= 0.1 * quota for r in rates), (min(rates), max(rates))
