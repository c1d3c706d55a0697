"""Watches that outlive their znode. kazoo's ``ChildrenWatch`` stops for good, silently, once the znode it watches
is deleted (or is missing when it is set): a parent an operator deleted and made again, or a cluster's chroot wiped
and rebuilt, would never be followed again. kazoo's ``DataWatch`` goes on across a deletion (it waits with an
``exists`` watch), which is what sets the children watch again here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.recipe.watchers import ChildrenWatch


class LastingChildrenWatch:
    """``func(children)`` each time ``path``'s children change, for as long as ``func`` does not answer False: a
    ``ChildrenWatch`` of ``path``, set again whenever the data watch of ``path`` finds it present while the children
    watch has stopped (deleted, then made again; or missing at first). Callbacks come on kazoo's event thread, in
    order; ``func`` may be called again with the same children after the znode comes back."""

    def __init__(self, zk: KazooClient, path: str, func: Callable[[list[str]], Any]) -> None:
        self._zk = zk
        self._path = path
        self._func = func
        self._done = False
        self._children = ChildrenWatch(zk, path, self._on_children)
        zk.DataWatch(path, self._on_data)

    def _on_children(self, children: list[str]) -> bool:
        if self._func(children) is False:
            self._done = True
            return False
        return True

    def _on_data(self, _: bytes | None, stat: Any) -> bool:
        if self._done:
            return False
        # kazoo marks a ChildrenWatch that met NoNode as stopped (it calls no function then): whatever order the
        # deletion's and the creation's events come in, the data watch's read after the creation sees it stopped.
        if stat is not None and self._children._stopped:
            self._children = ChildrenWatch(self._zk, self._path, self._on_children)
        return True


def lasting_children_watch(zk: KazooClient, path: str, func: Callable[[list[str]], Any]) -> LastingChildrenWatch:
    """A ``LastingChildrenWatch`` of ``path`` (blocking: it reads ``path`` once)."""
    return LastingChildrenWatch(zk, path, func)
