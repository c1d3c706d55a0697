"""Deterministic records for the client compatibility tests."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

N_RECORDS = 10_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
BASE_TS = 1_700_000_000_000


@dataclass(frozen=True)
class Rec:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    timestamp: int


def make_records(n: int = N_RECORDS, *, seed: str = "rill") -> list[Rec]:
    out = []
    for i in range(n):
        digest = hashlib.sha256(f"{seed}-{i}".encode()).hexdigest()
        value = (f"value-{i}-" + digest * (1 + i % 7)).encode()
        out.append(
            Rec(
                key=f"key-{i % 97}-{i}".encode(),
                value=value,
                headers=[("h1", f"v{i}".encode()), ("trace", digest[:8].encode())],
                timestamp=BASE_TS + i,
            )
        )
    return out
