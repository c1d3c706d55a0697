"""Capture real clients' request bytes as codec fixtures (run by hand: ``python capture_fixtures.py``).

A tiny single-threaded broker on 127.0.0.1 answers ApiVersions, Metadata, InitProducerId and Produce with
Rill's codec, while each client (confluent-kafka, kafka-python, aiokafka) runs in a subprocess and
produces one record. The first frame of each (API, version) a client sends is saved, without its size
prefix, as ``fixtures/<client>_<api>_v<version>.bin``.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from rill.protocol import ApiKey, decode_request, decode_request_header, encode_response

FIXTURES = Path(__file__).parent / "fixtures"
TOPIC = "fixture-topic"
TOPIC_ID = uuid.UUID("5d6b1c2e-0000-4000-8000-00000000f1c5")
SERVED = {
    ApiKey.PRODUCE: (3, 10),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    # advertised so that clients pick record batch v2 (librdkafka requires Fetch v4+ for it); never used
    ApiKey.FETCH: (4, 16),
    ApiKey.LIST_OFFSETS: (1, 7),
}

CLIENTS = {
    "confluent": f"""
import confluent_kafka
p = confluent_kafka.Producer({{"bootstrap.servers": "127.0.0.1:{{port}}", "client.id": "fixture-confluent",
                               "linger.ms": 0, "enable.idempotence": True}})
p.produce("{TOPIC}", key=b"fixture-key", value=b"fixture-value", headers=[("h1", b"v1")],
          timestamp=1700000000000)
p.flush(10)
""",
    "kafkapython": f"""
import kafka
p = kafka.KafkaProducer(bootstrap_servers="127.0.0.1:{{port}}", client_id="fixture-kafkapython")
p.send("{TOPIC}", key=b"fixture-key", value=b"fixture-value", headers=[("h1", b"v1")],
       timestamp_ms=1700000000000).get(10)
p.close(5)
""",
    "aiokafka": f"""
import asyncio, aiokafka
async def main():
    p = aiokafka.AIOKafkaProducer(bootstrap_servers="127.0.0.1:{{port}}", client_id="fixture-aiokafka")
    await p.start()
    await p.send_and_wait("{TOPIC}", key=b"fixture-key", value=b"fixture-value", headers=[("h1", b"v1")],
                          timestamp_ms=1700000000000)
    await p.stop()
asyncio.run(main())
""",
}


def _response(api_key: int, version: int, body: dict[str, Any], port: int) -> dict[str, Any]:
    if api_key == ApiKey.API_VERSIONS:
        table = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in SERVED.items()]
        return {"error_code": 35 if version > 4 else 0, "api_keys": table}
    if api_key == ApiKey.METADATA:
        partitions = [{"partition_index": 0, "leader_id": 0, "leader_epoch": 0, "replica_nodes": [0],
                       "isr_nodes": [0]}]
        return {
            "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": port}],
            "cluster_id": "fixture-cluster",
            "controller_id": 0,
            "topics": [{"name": TOPIC, "topic_id": TOPIC_ID, "partitions": partitions}],
        }
    if api_key == ApiKey.INIT_PRODUCER_ID:
        return {"producer_id": 1000, "producer_epoch": 0}
    if api_key == ApiKey.PRODUCE:
        return {"responses": [
            {"name": t["name"], "partition_responses": [
                {"index": p["index"], "base_offset": 0, "log_append_time_ms": -1}
                for p in t["partition_data"]]}
            for t in body["topic_data"]]}
    raise ValueError(api_key)


def _serve(conn: socket.socket, port: int, client: str, done: threading.Event) -> None:
    buf = b""
    seen: set[tuple[int, int]] = set()
    with conn:
        while not done.is_set():
            try:
                chunk = conn.recv(1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 4:
                (n,) = struct.unpack_from(">i", buf)
                if len(buf) < 4 + n:
                    break
                frame, buf = buf[4 : 4 + n], buf[4 + n :]
                header, pos = decode_request_header(frame)
                key, version = header.api_key, header.api_version
                if (key, version) not in seen:
                    seen.add((key, version))
                    name = ApiKey(key).name.lower()
                    (FIXTURES / f"{client}_{name}_v{version}.bin").write_bytes(frame)
                body = {} if key == ApiKey.API_VERSIONS else decode_request(key, version, frame, pos)
                if key == ApiKey.PRODUCE and body["acks"] == 0:
                    continue
                reply_version = 0 if key == ApiKey.API_VERSIONS and version > 4 else version
                for c in encode_response(key, reply_version, header.correlation_id,
                                         _response(key, version, body, port)):
                    assert isinstance(c, bytes)
                    conn.sendall(c)


def capture(client: str) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.5)
    port = srv.getsockname()[1]
    done = threading.Event()
    threads: list[threading.Thread] = []

    def accept_loop() -> None:
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=_serve, args=(conn, port, client, done), daemon=True)
            t.start()
            threads.append(t)

    acceptor = threading.Thread(target=accept_loop, daemon=True)
    acceptor.start()
    try:
        subprocess.run([sys.executable, "-c", CLIENTS[client].replace("{port}", str(port))], timeout=60,
                       check=True)
    finally:
        done.set()
        srv.close()
        acceptor.join(2)


if __name__ == "__main__":
    FIXTURES.mkdir(exist_ok=True)
    for name in sys.argv[1:] or CLIENTS:
        capture(name)
        print("captured", name)
