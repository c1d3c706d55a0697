from __future__ import annotations

import asyncio
import time

from rill.common import TopicPartition
from rill.replica.purgatory import DelayedOperationPurgatory

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def test_append_wakes_waiter_and_timeout_expires() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("Fetch")
        waiter = asyncio.create_task(p.wait([TP, OTHER], 5.0))
        await asyncio.sleep(0.01)
        assert p.size == 1
        p.check_and_complete(OTHER)
        assert await waiter is True
        assert p.size == 0
        started = time.monotonic()
        assert await p.wait([TP], 0.05) is False
        assert time.monotonic() - started >= 0.04
        assert await p.wait([TP], 0) is False

    asyncio.run(main())


def test_completion_of_unwatched_key_is_harmless() -> None:
    async def main() -> None:
        p = DelayedOperationPurgatory("Fetch")
        p.check_and_complete(TP)
        waiter = asyncio.create_task(p.wait([TP], 5.0))
        await asyncio.sleep(0.01)
        p.wake_all()
        assert await waiter is True

    asyncio.run(main())
