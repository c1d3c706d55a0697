"""What the registry's protoc runs cost: however many compiles are asked for at once, only a few protoc
processes run at a time (each is a Python interpreter: one client must not make the registry fork without
bound)."""

from __future__ import annotations

import asyncio
import os

from rill.registry import protobuf_schema

PROTO = 'syntax = "proto3";\npackage p;\nmessage M { string a = 1; }\n'


def _protoc_children() -> set[int]:
    """The protoc processes this process started (from /proc: their parent is us)."""
    out = set()
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z" and b"grpc_tools.protoc" in cmdline:
            out.add(int(entry))
    return out


async def _first_child() -> int:
    for _ in range(2000):
        children = _protoc_children()
        if children:
            return min(children)
        await asyncio.sleep(0.005)
    raise AssertionError("no protoc process started")


def test_concurrent_compiles_run_a_bounded_number_of_protoc() -> None:
    async def main() -> None:
        tasks = [
            asyncio.create_task(protobuf_schema.compile_schema(PROTO, []))
            for _ in range(3 * protobuf_schema.MAX_CONCURRENT_COMPILES)
        ]
        most = 0
        while not all(t.done() for t in tasks):
            most = max(most, len(_protoc_children()))
            await asyncio.sleep(0.002)
        for t in tasks:
            assert t.result().message_type[0].name == "M"
        assert 0 < most <= protobuf_schema.MAX_CONCURRENT_COMPILES

    asyncio.run(main())
