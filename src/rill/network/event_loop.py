"""The event loop Rill runs on: uvloop when installed, asyncio's default loop otherwise.

``RILL_EVENT_LOOP=asyncio`` in the environment forces the default loop (for comparisons).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The constructor of the preferred event loop."""
    if os.environ.get("RILL_EVENT_LOOP", "").lower() != "asyncio":
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            pass
        else:
            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
            return factory
    return asyncio.new_event_loop


def new_event_loop() -> asyncio.AbstractEventLoop:
    return loop_factory()()


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh preferred event loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
