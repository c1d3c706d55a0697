"""Failed sign-ins, counted so that nobody can guess passwords through the console at the cluster's pace.

Each refused sign-in is counted twice: against the address it came from and against the user name tried.
- An address with ``ADDRESS_FAILURES`` refusals in the last ``WINDOW_S`` seconds is refused at once (429)
  until the oldest of them is that old: a guesser at one address gets ``ADDRESS_FAILURES`` tries a window.
- A user name refused more than ``USER_FREE_FAILURES`` times in a row waits before its next try, twice as
  long after each further refusal, at most ``USER_MAX_DELAY_S``: guessing one user's password from many
  addresses gets about one try a minute, while the user, who knows it, waits at most that long.
A successful sign-in clears its user name's count. What is kept is bounded (``MAX_TRACKED`` of each kind,
the oldest dropped first), so a flood of made-up names cannot grow the console's memory.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

WINDOW_S = 300.0
ADDRESS_FAILURES = 10
USER_FREE_FAILURES = 5
USER_MAX_DELAY_S = 60.0
MAX_TRACKED = 10_000


class SignInLimits:
    def __init__(self, *, window_s: float = WINDOW_S, address_failures: int = ADDRESS_FAILURES,
                 user_free_failures: int = USER_FREE_FAILURES, user_max_delay_s: float = USER_MAX_DELAY_S,
                 max_tracked: int = MAX_TRACKED) -> None:  # fmt: skip
        self.window_s = window_s
        self.address_failures = address_failures
        self.user_free_failures = user_free_failures
        self.user_max_delay_s = user_max_delay_s
        self.max_tracked = max_tracked
        self._by_address: OrderedDict[str, deque[float]] = OrderedDict()
        self._by_user: OrderedDict[str, tuple[int, float]] = OrderedDict()  # refusals in a row, last refusal
        self._lock = threading.Lock()

    def wait_s(self, address: str, user: str, now: float | None = None) -> float:
        """Seconds before a sign-in from ``address`` as ``user`` may be checked (0: now)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            wait = 0.0
            failures = self._by_address.get(address)
            if failures is not None:
                while failures and now - failures[0] >= self.window_s:
                    failures.popleft()
                if len(failures) >= self.address_failures:
                    wait = failures[0] + self.window_s - now
            count, last = self._by_user.get(user, (0, 0.0))
            if count > self.user_free_failures:
                delay = min(self.user_max_delay_s, 2.0 ** (count - self.user_free_failures))
                wait = max(wait, last + delay - now)
            return max(0.0, wait)

    def refused(self, address: str, user: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            failures = self._by_address.pop(address, None) or deque()
            failures.append(now)
            while len(failures) > self.address_failures:
                failures.popleft()
            self._by_address[address] = failures
            count, _ = self._by_user.pop(user, (0, 0.0))
            self._by_user[user] = (count + 1, now)
            for kept in (self._by_address, self._by_user):
                while len(kept) > self.max_tracked:
                    kept.popitem(last=False)

    def accepted(self, user: str) -> None:
        with self._lock:
            self._by_user.pop(user, None)
