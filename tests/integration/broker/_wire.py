"""A bare Kafka-protocol connection for tests that need exact control over requests."""

from __future__ import annotations

import socket
import struct
from typing import Any

from rill.protocol import decode_response, encode_request


class Wire:
    def __init__(
        self, bootstrap: str, timeout: float = 10.0, source: str | None = None, receive_buffer: int | None = None
    ) -> None:
        host, port = bootstrap.rsplit(":", 1)
        if receive_buffer is None:
            source_address = (source, 0) if source is not None else None
            self.sock = socket.create_connection((host, int(port)), timeout=timeout, source_address=source_address)
        else:  # SO_RCVBUF before connecting, so the window offered is that small from the start
            self.sock = socket.socket()
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            self.sock.settimeout(timeout)
            self.sock.connect((host, int(port)))
        self._corr = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self._corr += 1
        self.send_raw(encode_request(api_key, version, self._corr, "wire-test", body))
        corr, resp = decode_response(api_key, version, self.read_frame())
        assert corr == self._corr
        return resp

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    def close(self) -> None:
        self.sock.close()
