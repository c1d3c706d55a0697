"""Changes made of several ZooKeeper writes go in one transaction: all of them or none (a change's data and the
change notices brokers follow, several resources changed by one request), each write conditional on what was read
(a version, or that the znode is missing). ``committed`` tells a transaction's results apart: made, lost a race to
another writer (read again and retry), or failed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from rill.errors import ErrorCode, KafkaError

# What a transaction's operation answers when another writer changed the znode since it was read.
RACES = (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)
# What the other operations of a transaction that failed answer.
ROLLED_BACK = (RolledBackError, RuntimeInconsistency)


def committed(results: list[Any]) -> bool:
    """True when every operation was made; False when one lost a race (read again, and try again); raises the
    operation's error otherwise."""
    errors = [r for r in results if isinstance(r, Exception) and not isinstance(r, ROLLED_BACK)]
    if not errors:
        return True
    if all(isinstance(e, RACES) for e in errors):
        return False
    raise errors[0]


MAX_LOST_RACES = 100
"""Transactions of one change that may lose in a row before it gives up (with live writers, one wins each round)."""


def after_lost_race(zk: KazooClient, attempt: int, parents: Iterable[str]) -> None:
    """Before a change's transaction is built again: make the ``parents`` its creates need (a parent deleted since the
    broker made it fails every create below it with NoNode, which reading again cannot cure), and give up once
    ``attempt`` reaches ``MAX_LOST_RACES`` rather than retry without end on a worker thread."""
    if attempt >= MAX_LOST_RACES:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"a ZooKeeper transaction lost {attempt} races in a row")
    for parent in parents:
        zk.ensure_path(parent)
