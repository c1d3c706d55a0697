"""One broker and one registry for the registry tests of a module; each test uses its own subjects."""

from __future__ import annotations

import http.client as httplib
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

import rill.testing
from rill.registry.server import RegistryThread
from rill.testing import TestBroker
from rill.testing.registry import registry


@pytest.fixture(scope="module")
def broker() -> Iterator[TestBroker]:
    with rill.testing.broker() as b:
        yield b


@pytest.fixture(scope="module")
def reg(broker: TestBroker) -> Iterator[RegistryThread]:
    with registry(broker.bootstrap_servers) as r:
        yield r


class Http:
    """Raw HTTP/1.1 requests on one kept-alive connection (status and decoded JSON body)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = httplib.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)

    def __call__(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
        self.conn.request(method, path, body=data, headers=headers)
        response = self.conn.getresponse()
        payload = response.read()
        assert response.getheader("Content-Type") == "application/vnd.schemaregistry.v1+json"
        return response.status, json.loads(payload) if payload else None

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def http(reg: RegistryThread) -> Iterator[Http]:
    h = Http(reg.url)
    yield h
    h.close()
