"""ConnectionQuotas: counts per client address and in total against Kafka's limits."""

from __future__ import annotations

from rill.network.connection_quotas import ConnectionQuotas


def test_per_address_limit_and_overrides() -> None:
    q = ConnectionQuotas(max_per_ip=2, per_ip_overrides={"10.0.0.9": 0, "::1": 1})
    assert q.try_inc("10.0.0.1") and q.try_inc("10.0.0.1")
    assert not q.try_inc("10.0.0.1")  # refused: nothing counted
    assert q.count("10.0.0.1") == 2 and q.total == 2
    assert not q.try_inc("10.0.0.9")
    assert q.try_inc("0:0:0:0:0:0:0:1") and not q.try_inc("::1")  # one address, two spellings
    assert q.try_inc("::ffff:10.0.0.2") and q.count("10.0.0.2") == 1  # IPv4-mapped counts as IPv4
    q.dec("10.0.0.1")
    assert q.try_inc("10.0.0.1") and q.total == 4
    for host in ("10.0.0.1", "10.0.0.1", "::1", "10.0.0.2"):
        q.dec(host)
    assert q.total == 0 and q.count("10.0.0.1") == 0


def test_total_limit_and_excess_after_lowering() -> None:
    q = ConnectionQuotas(max_connections=3)
    for i in range(3):
        assert q.slot_available()
        assert q.try_inc(f"10.0.0.{i}")
    assert not q.slot_available() and q.excess == 0
    q.update(1, q.max_per_ip, {})
    assert q.excess == 2
    q.dec("10.0.0.0")
    assert q.excess == 1 and not q.slot_available()
