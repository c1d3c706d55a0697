"""The console's limits on refused sign-ins: per address a window, per user name a growing delay, bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.console.sign_in_limits import SignInLimits


def test_an_address_is_refused_for_the_rest_of_the_window_after_its_refusals() -> None:
    limits = SignInLimits(window_s=300, address_failures=20, user_free_failures=1000)
    for i in range(20):
        assert limits.wait_s("10.0.0.1", f"user{i}", now=float(i)) == 0
        limits.refused("10.0.0.1", f"user{i}", now=float(i))
    assert limits.wait_s("10.0.0.1", "anyone", now=20.0) == 280.0  # until the first refusal is 300 s old
    assert limits.wait_s("10.0.0.2", "anyone", now=20.0) == 0  # another address is not held
    assert limits.wait_s("10.0.0.1", "anyone", now=300.0) == 0  # the first refusal left the window


def test_a_user_name_waits_twice_as_long_after_each_refusal_past_the_free_ones_and_a_success_clears_it() -> None:
    limits = SignInLimits(address_failures=10_000, user_free_failures=5, user_max_delay_s=60)
    for i in range(5):
        limits.refused(f"10.0.0.{i}", "admin", now=100.0)
        assert limits.wait_s("10.9.9.9", "admin", now=100.0) == 0
    waits = []
    for i in range(5, 12):
        limits.refused(f"10.0.0.{i}", "admin", now=100.0)
        waits.append(limits.wait_s("10.9.9.9", "admin", now=100.0))
    assert waits == [2, 4, 8, 16, 32, 60, 60]
    assert limits.wait_s("10.9.9.9", "someone-else", now=100.0) == 0
    limits.accepted("admin")
    assert limits.wait_s("10.9.9.9", "admin", now=100.0) == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=8), st.text(max_size=8)), max_size=300))
def test_what_is_kept_stays_bounded_whatever_names_are_tried(attempts: list[tuple[str, str]]) -> None:
    limits = SignInLimits(max_tracked=10, address_failures=3)
    for n, (address, user) in enumerate(attempts):
        limits.refused(address, user, now=float(n))
        assert len(limits._by_address) <= 10 and len(limits._by_user) <= 10
        assert all(len(d) <= 3 for d in limits._by_address.values())
