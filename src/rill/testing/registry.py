"""Start a schema registry beside a test broker.

    with rill.testing.broker() as b, rill.testing.registry.registry(b.bootstrap_servers) as r:
        client = SchemaRegistryClient({"url": r.url})

The registry listens on a free 127.0.0.1 port, runs in a background thread with its own event loop
and is stopped on exit; its state stays in the broker's ``_schemas`` topic, so a second registry (or
the same one restarted) on the same broker sees everything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rill.registry.server import RegistryThread, SchemaRegistry


@contextlib.contextmanager
def registry(
    bootstrap_servers: str, *, topic: str = "_schemas", group: str = "schema-registry", startup_timeout: float = 60.0
) -> Iterator[RegistryThread]:
    """A running registry (``.url``, ``.registry``) on ``bootstrap_servers``; stopped on exit."""
    runner = RegistryThread(SchemaRegistry(bootstrap_servers, host="127.0.0.1", port=0, topic=topic, group=group))
    runner.start(startup_timeout)
    try:
        yield runner
    finally:
        runner.stop()
