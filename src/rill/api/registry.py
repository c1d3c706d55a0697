"""The handler registry: which APIs this broker implements, and at which versions.

A handler module registers its function with ``@handler(ApiKey.X, min_version, max_version)``. ApiVersions
answers from this registry (intersected with the codec's declared versions), so the advertised table never
claims an API or a version that has no handler.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rill.protocol import MESSAGES

if TYPE_CHECKING:
    from rill.api.context import RequestContext

Body = dict[str, Any]


class DeferredBody:
    """A response still to come: the request is handled (an acks=all Produce has appended its records) and only
    its answer waits (for the followers). Awaiting ``wait`` gives the body. A handler returns one only when its
    context allows it (``RequestContext.may_defer``); the connection then handles its next request meanwhile and
    writes the answers in order."""

    __slots__ = ("wait",)

    def __init__(self, wait: Awaitable[Body]) -> None:
        self.wait = wait


HandlerFn = Callable[["RequestContext", Body], Awaitable[Body | DeferredBody | None]]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn


REGISTRY: dict[int, ApiHandler] = {}

# Every module that registers handlers; imported once by load_handlers().
HANDLER_MODULES = (
    "rill.api.api_versions",
    "rill.api.metadata",
    "rill.api.describe_topic_partitions",
    "rill.api.produce",
    "rill.api.fetch",
    "rill.api.list_offsets",
    "rill.api.offset_for_leader_epoch",
    "rill.api.topics",
    "rill.api.configs",
    "rill.api.delete_records",
    "rill.api.cluster",
    "rill.api.log_dirs",
    "rill.api.elect_leaders",
    "rill.api.reassignments",
    "rill.api.init_producer_id",
    "rill.api.groups",
    "rill.api.consumer_groups",
    "rill.api.group_offsets",
    "rill.api.client_quotas",
    "rill.api.sasl",
    "rill.api.scram_credentials",
    "rill.api.acls",
    "rill.api.transactions",
    "rill.api.txn_offset_commit",
    "rill.api.write_txn_markers",
    "rill.api.describe_producers",
    "rill.api.share_groups",
    "rill.api.share_group_admin",
    "rill.api.share_state",
    "rill.api.share_group_offsets",
    "rill.api.telemetry",
    "rill.api.list_config_resources",
)


def handler(api_key: int, min_version: int, max_version: int) -> Callable[[HandlerFn], HandlerFn]:
    def register(fn: HandlerFn) -> HandlerFn:
        REGISTRY[int(api_key)] = ApiHandler(int(api_key), min_version, max_version, fn)
        return fn

    return register


def load_handlers(modules: tuple[str, ...] | None = None) -> dict[int, ApiHandler]:
    """Import every handler module (``HANDLER_MODULES`` unless given); a module that is missing or
    registers no handler is an error (RuntimeError naming it), not an API quietly left out of
    ApiVersions."""
    modules = HANDLER_MODULES if modules is None else modules
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            raise RuntimeError(f"handler module {name} cannot be imported: {e}") from e
    registered = {h.fn.__module__ for h in REGISTRY.values()}
    empty = [name for name in modules if name not in registered]
    if empty:
        raise RuntimeError(f"handler module(s) {', '.join(empty)} register no handler")
    return REGISTRY


def supported_versions(handlers: dict[int, ApiHandler]) -> list[dict[str, int]]:
    """The ApiVersions table: each handled API at the versions both its handler and the codec know.
    A handler for an API the codec does not declare, or at no version it declares, is an error
    (RuntimeError), not an API quietly left out of the table."""
    table = []
    for key in sorted(handlers):
        h = handlers[key]
        spec = MESSAGES.get(key)
        if spec is None:
            name = f"{h.fn.__module__}.{h.fn.__name__}"
            raise RuntimeError(f"{name} handles API key {key}, which the codec does not declare")
        lo = max(h.min_version, spec.min_version)
        hi = min(h.max_version, spec.max_version)
        if lo > hi:
            raise RuntimeError(
                f"{h.fn.__module__}.{h.fn.__name__} handles {spec.name} v{h.min_version}-v{h.max_version};"
                f" the codec declares v{spec.min_version}-v{spec.max_version}"
            )
        table.append({"api_key": key, "min_version": lo, "max_version": hi})
    return table
