"""Malformed and unknown requests get Confluent's error codes, and the server keeps serving."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

from rill.registry.server import RegistryThread

RECORD = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


def code(reply: tuple[int, Any]) -> tuple[int, int]:
    status, body = reply
    return status, body["error_code"]


def test_error_codes(http: Any) -> None:
    assert code(http("POST", "/subjects/bad-value/versions", raw=b"{not json")) == (400, 400)
    assert code(http("POST", "/subjects/bad-value/versions", {"schema": '{"type": "recrod"}'})) == (422, 42201)
    assert code(http("POST", "/subjects/bad-value/versions", {"schema": "not json at all"})) == (422, 42201)
    assert code(http("POST", "/subjects/bad-value/versions", {"schema": 5})) == (422, 42201)
    assert code(http("POST", "/subjects/bad-value/versions", {"schema": RECORD, "schemaType": "XML"})) == (422, 42201)
    assert code(http("POST", "/subjects/bad-value/versions", [1, 2])) == (422, 42201)
    bad_ref = {"schema": RECORD, "references": [{"name": "x", "subject": "nowhere", "version": 1}]}
    assert code(http("POST", "/subjects/bad-value/versions", bad_ref)) == (422, 42201)
    assert code(http("GET", "/subjects/bad-value/versions")) == (404, 40401)  # nothing was registered
    assert code(http("GET", "/subjects/unknown-subject/versions/1")) == (404, 40401)
    assert code(http("GET", "/schemas/ids/987654")) == (404, 40403)
    assert code(http("GET", "/schemas/ids/not-a-number")) == (404, 40403)

    assert http("POST", "/subjects/ok-value/versions", {"schema": RECORD})[0] == 200
    assert code(http("GET", "/subjects/ok-value/versions/2")) == (404, 40402)
    for version in ("abc", "0", "-2", "99999999999"):
        assert code(http("GET", f"/subjects/ok-value/versions/{version}")) == (422, 42202)
        assert code(http("DELETE", f"/subjects/ok-value/versions/{version}")) == (422, 42202)
    assert code(http("PUT", "/config", {"compatibility": 7})) == (422, 42203)
    assert code(http("PUT", "/config", raw=b"[")) == (400, 400)
    assert code(http("GET", "/no/such/path")) == (404, 404)
    assert code(http("PATCH", "/subjects")) == (405, 405)

    status, body = http("GET", "/subjects/ok-value/versions/latest")
    assert status == 200 and body["subject"] == "ok-value" and body["version"] == 1
    assert http("GET", "/subjects/ok-value/versions/1/schema") == (200, json.loads(RECORD))
    assert http("GET", f"/schemas/ids/{body['id']}/subjects") == (200, ["ok-value"])
    assert http("GET", "/schemas/types") == (200, ["AVRO", "JSON", "PROTOBUF"])
    assert http("GET", "/schemas?subjectPrefix=ok-") == (200, [body])
    assert http("GET", "/contexts") == (200, ["."])
    status, subjects = http("GET", "/subjects")
    assert status == 200 and "ok-value" in subjects and "bad-value" not in subjects


def test_garbage_on_the_socket_does_not_stop_the_server(reg: RegistryThread, http: Any) -> None:
    parts = urlsplit(reg.url)
    for garbage in (
        b"\x00\x01\x02 nonsense\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
    ):
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
            s.sendall(garbage)
            reply = s.recv(4096)
            assert reply.startswith(b"HTTP/1.1 400 ")
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(b"GET /schemas/types HTTP/1.1\r\nHost: x\r\n\r\n")  # a half-closed client
        s.shutdown(socket.SHUT_WR)
        assert b"200 OK" in s.recv(4096)
    assert http("GET", "/config")[0] == 200


def test_keep_alive_and_chunked_bodies(reg: RegistryThread) -> None:
    parts = urlsplit(reg.url)
    body = json.dumps({"schema": RECORD}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as s:
        s.sendall(
            b"POST /subjects/chunked-value/versions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked
            + b"GET /subjects/chunked-value/versions HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        received = b""
        while received.count(b"HTTP/1.1 200 OK") < 2:
            data = s.recv(4096)
            assert data, received
            received += data
    assert received.rstrip().endswith(b"[1]")
