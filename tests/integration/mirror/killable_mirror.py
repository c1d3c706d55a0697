"""``rill mirror`` that SIGKILLs itself at a chosen point: the seam through which tests kill the real command
exactly during its start, its topic creation, its first commits or mid-copy, instead of hoping a timed kill
lands there.

    python killable_mirror.py POINT N -- <rill mirror arguments>

The process kills itself the N-th time (1-based) it reaches POINT:

- ``syncs-topic-sent``: the creation of the offset-syncs topic has been requested, not awaited;
- ``topic-created``: a target topic has been created (awaited), nothing subscribed yet;
- ``assigned``: source partitions were handed over (the rebalance callback returned), nothing copied;
- ``delivered``: the target acknowledged a record (others are in flight, nothing committed for them);
- ``durable``: the records in flight and their offset syncs are acknowledged, the commit of new positions
  not sent yet;
- ``committed``: a commit of new positions returned;
- ``txn-started``: (``--exactly-once``) a partition's transactional id was initialised (its previous owner
  fenced), nothing copied;
- ``txn-acked``: (``--exactly-once``) a transaction's records are acknowledged, its position and commit not
  sent yet;
- ``txn-committed``: (``--exactly-once``) a transaction committed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient

from rill.cli import mirror as mirror_cli
from rill.mirror import mirror_maker
from rill.mirror.transactional_copy import TransactionalCopy

POINTS = (
    "syncs-topic-sent",
    "topic-created",
    "assigned",
    "delivered",
    "durable",
    "committed",
    "txn-started",
    "txn-acked",
    "txn-committed",
)


class _Counter:
    def __init__(self, point: str, nth: int) -> None:
        self.point = point
        self.nth = nth
        self.seen = 0

    def reached(self, point: str) -> None:
        if point != self.point:
            return
        self.seen += 1
        if self.seen == self.nth:
            sys.stderr.write(f"killing myself at {point} #{self.nth}\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def _after(owner: Any, name: str, point: str, counter: _Counter) -> None:
    """Wrap ``owner.name`` so that reaching it counts as ``point`` once it has returned."""
    original: Callable[..., Any] = getattr(owner, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        counter.reached(point)
        return result

    setattr(owner, name, wrapped)


def _install(counter: _Counter) -> None:
    create_topics = AdminClient.create_topics

    def create(self: AdminClient, new_topics: list[Any], *args: Any, **kwargs: Any) -> Any:
        futures = create_topics(self, new_topics, *args, **kwargs)
        if any(t.topic.startswith("mirror.") for t in new_topics):
            counter.reached("syncs-topic-sent")
        else:
            for future in futures.values():
                with contextlib.suppress(Exception):  # already there: the caller sees it too
                    future.result(15)
            counter.reached("topic-created")
        return futures

    AdminClient.create_topics = create  # type: ignore[method-assign]
    maker = mirror_maker.MirrorMaker
    _after(maker, "_on_assign", "assigned", counter)
    _after(maker, "_on_delivery", "delivered", counter)
    make_durable, commit = maker._make_durable, maker._commit

    def positions(self: Any) -> dict[Any, tuple[int, int]]:
        return {key: (status.acked, status.committed) for key, status in self._copying.items()}

    def durable(self: Any) -> None:
        make_durable(self)
        if any(acked != committed for acked, committed in positions(self).values()):
            counter.reached("durable")

    def committed(self: Any, force: bool = False) -> None:
        before = positions(self)
        commit(self, force)
        if positions(self) != before:
            counter.reached("committed")

    maker._make_durable = durable  # type: ignore[method-assign]
    maker._commit = committed  # type: ignore[method-assign]
    _after(maker, "_take_syncs", "txn-acked", counter)
    _after(TransactionalCopy, "start", "txn-started", counter)
    _after(TransactionalCopy, "copy", "txn-committed", counter)


def main(argv: list[str]) -> int:
    point, nth, separator, *rest = argv
    if point not in POINTS or separator != "--":
        sys.stderr.write(f"usage: killable_mirror.py {{{'|'.join(POINTS)}}} N -- <rill mirror arguments>\n")
        return 2
    _install(_Counter(point, int(nth)))
    return mirror_cli.main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
