"""Log lines a remote peer can cause at will, at most one per cause every few seconds.

A client that repeats a bad request, or a fuzzer opening thousands of connections, must not be able
to fill the broker's log: per cause, one line is logged at its level at most every ``interval_s``;
the others go to DEBUG and are counted, and the next line logged at the level says how many were
held back.
"""

from __future__ import annotations

import logging
import time
from typing import Any


class RateLimitedLog:
    """One line per cause every ``interval_s`` at the line's level, the rest at DEBUG (counted)."""

    __slots__ = ("_causes", "interval_s", "logger")

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        # cause -> (when its last line was logged at the level, lines held back since); causes are
        # names written in the code, never values taken from the wire, so this stays small.
        self._causes: dict[str, tuple[float, int]] = {}

    def __call__(self, cause: str, level: int, msg: str, *args: Any, exc_info: bool | BaseException = False) -> bool:
        """Log ``msg % args`` for ``cause`` at ``level``; True if it went out at that level, False if at DEBUG."""
        now = time.monotonic()
        last, quiet = self._causes.get(cause, (-self.interval_s, 0))
        if now - last < self.interval_s:
            self._causes[cause] = (last, quiet + 1)
            self.logger.debug(msg, *args, exc_info=exc_info or None)
            return False
        self._causes[cause] = (now, 0)
        if quiet:
            msg = f"{msg} (and {quiet} more such lines in the last {now - last:.0f}s, at DEBUG)"
        self.logger.log(level, msg, *args, exc_info=exc_info or None)
        return True

    def held_back(self, cause: str) -> int:
        """Lines of ``cause`` sent to DEBUG since its last line at the level."""
        return self._causes.get(cause, (0.0, 0))[1]
