"""Fixtures shared by the log tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rill.log.log import Log, LogAppendInfo


@pytest.fixture(params=["read-only", "writable"])
def append_input_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test twice: with ``Log.append`` given the test's bytes as they are (read-only: copied
    headers), and given them in a fresh bytearray, as a Produce request hands them over (writable:
    one batch takes the single-batch path, headers are patched in place)."""
    if request.param == "writable":
        original = Log.append

        def append(self: Log, records: memoryview | bytes | bytearray, **kwargs: int | None) -> LogAppendInfo:
            if isinstance(records, bytes):
                records = bytearray(records)
            return original(self, records, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Log, "append", append)
    yield request.param
