"""Produce and consume over TLS against plaintext, on one Rill broker with both listeners, in the same run.

    python -m bench.tls_bench [--mb 200] [--size 10240] [--rounds 2]

A throwaway CA and server certificate are made with the ``openssl`` command in a temporary directory. Each
round produces ``--mb`` MiB of ``--size``-byte records with confluent-kafka (acks=1, lz4 off) to a topic over
PLAINTEXT, then over SSL, and reads each topic back from the start with a consumer over the same listener;
rounds alternate the order (A/B, B/A). Prints MiB/s per listener and direction, and TLS as a share of plaintext.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka

from bench.brokers import BrokerProcess, free_port, rill_spec
from bench.harness import cpu_seconds


def _pki(d: Path) -> tuple[Path, Path]:
    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=bench-ca")  # fmt: skip
    ssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    ssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "server.pem", "-days", "1", "-extfile", "san.ext")  # fmt: skip
    store = d / "store.pem"
    store.write_text((d / "server.pem").read_text() + (d / "server.key").read_text())
    return d / "ca.pem", store


def _produce(conf: dict[str, object], topic: str, total: int, size: int) -> float:
    producer = confluent_kafka.Producer({**conf, "linger.ms": 5, "batch.size": 1_000_000, "acks": 1})
    value = bytes(size)
    n = total // size
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return n * size / (time.perf_counter() - t0) / 2**20


def _consume(conf: dict[str, object], topic: str, total: int, size: int) -> float:
    consumer = confluent_kafka.Consumer({**conf, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
                                         "enable.auto.commit": False, "fetch.max.bytes": 52428800})  # fmt: skip
    consumer.subscribe([topic])
    want, got, t0 = total // size, 0, 0.0
    deadline = time.monotonic() + 120
    while got < want and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is None:
                t0 = t0 or time.perf_counter()
                got += 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    return got * size / elapsed / 2**20


def _mean(pairs: list[tuple[float, float]], i: int) -> float:
    return sum(p[i] for p in pairs) / len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--size", type=int, default=10240)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rill-tls-bench-") as tmp:
        d = Path(tmp)
        ca, store = _pki(d)
        plain, tls = free_port(), free_port()
        overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
                     "ssl.keystore.type": "PEM", "ssl.keystore.location": str(store)}  # fmt: skip
        with BrokerProcess(rill_spec(plain, d / "data", overrides), d / "broker.log") as broker:
            broker.start()
            confs = {"PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain}"},
                     "SSL": {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
                             "ssl.ca.location": str(ca)}}  # fmt: skip
            results: dict[tuple[str, str], list[float]] = {}
            cpu: dict[tuple[str, str], list[tuple[float, float]]] = {}
            total = args.mb * 2**20
            for r in range(args.rounds):
                order = ["PLAINTEXT", "SSL"] if r % 2 == 0 else ["SSL", "PLAINTEXT"]
                for name in order:
                    topic = f"{name.lower()}-{r}"
                    assert broker.pid is not None
                    for direction, run in (("produce", _produce), ("consume", _consume)):
                        cpu0 = cpu_seconds(broker.pid)
                        results.setdefault((name, direction), []).append(run(confs[name], topic, total, args.size))
                        cpu1 = cpu_seconds(broker.pid)
                        cpu.setdefault((name, direction), []).append(
                            ((cpu1[0] - cpu0[0]) * 1e6 / (total / 1e6), (cpu1[1] - cpu0[1]) * 1e6 / (total / 1e6))
                        )
    for direction in ("produce", "consume"):
        p = sum(results[("PLAINTEXT", direction)]) / args.rounds
        t = sum(results[("SSL", direction)]) / args.rounds
        print(
            f"{direction:8s} PLAINTEXT {p:8.1f} MiB/s   SSL {t:8.1f} MiB/s   SSL/PLAINTEXT {t / p:5.2f}   "
            + "   ".join(
                f"{n} broker user/sys {_mean(cpu[(n, direction)], 0):.0f}/{_mean(cpu[(n, direction)], 1):.0f} us/MB"
                for n in ("PLAINTEXT", "SSL")
            )
        )


if __name__ == "__main__":
    main()
