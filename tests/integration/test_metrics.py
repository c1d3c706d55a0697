"""Broker metrics: ``BrokerMetrics`` values, the ``/metrics`` endpoint, and a broker's counters during a run."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rill import metrics_http
from rill.metrics import BrokerMetrics, start_http_server
from rill.metrics_sources import GroupOffset, PartitionStats

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return parse(resp.read().decode())


def test_counters_histograms_and_lazy_gauges() -> None:
    m = BrokerMetrics()
    m.on_request("PRODUCE", 0.002, 0)  # enum-style names get Kafka's label
    m.on_request("Produce", 0.3, 3)
    m.on_request("Fetch", 0.0001)
    m.on_request("API_VERSIONS", 0.0001)
    m.on_request("Metadata", 0.001, 9999)  # a code Rill does not know still counts
    m.on_produce("orders", 1000, 10)
    m.on_produce("orders", 500, 5)
    m.on_fetch("orders", 700)
    m.set_connections(4)
    m.set_partition_source(lambda: [PartitionStats("orders", 0, 4096, 2, 3, 15, 12)])
    m.set_group_source(lambda: [GroupOffset("billing", "orders", 0, 5), GroupOffset("billing", "gone", 0, 1)])
    m.set_purgatory_source(lambda: {"Fetch": 2, "Produce": 0})
    s = parse(m.render().decode())

    assert value(s, "kafka_server_brokertopicmetrics_bytesin_total", topic="orders") == 1500
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="orders") == 15
    assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="orders") == 700
    assert value(s, "kafka_network_requestmetrics_requests_total", request="Produce") == 2
    assert value(s, "kafka_network_requestmetrics_requests_total", request="Fetch") == 1
    assert value(s, "kafka_network_requestmetrics_requests_total", request="ApiVersions") == 1
    errors = "kafka_network_requestmetrics_errors_total"
    assert value(s, errors, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert value(s, errors, request="Metadata", error="9999") == 1
    assert not any(k[0] == errors and dict(k[1])["request"] == "Fetch" for k in s)
    latency = "kafka_network_requestmetrics_totaltime_seconds"
    assert value(s, latency + "_count", request="Produce") == 2
    assert value(s, latency + "_bucket", request="Produce", le="0.0025") == 1
    assert value(s, latency + "_bucket", request="Produce", le="0.5") == 2
    assert value(s, latency + "_sum", request="Produce") == pytest.approx(0.302)
    tp = {"topic": "orders", "partition": "0"}
    assert value(s, "kafka_log_log_size", **tp) == 4096
    assert value(s, "kafka_log_log_numlogsegments", **tp) == 2
    assert value(s, "kafka_log_log_logstartoffset", **tp) == 3
    assert value(s, "kafka_log_log_logendoffset", **tp) == 15
    assert value(s, "kafka_log_log_highwatermark", **tp) == 12
    group = {"consumergroup": "billing", "topic": "orders", "partition": "0"}
    assert value(s, "kafka_consumergroup_lag", **group) == 7
    assert value(s, "kafka_consumergroup_current_offset", **group) == 5
    assert ("kafka_consumergroup_lag", tuple(sorted({**group, "topic": "gone"}.items()))) not in s
    purgatory = "kafka_server_delayedoperationpurgatory_purgatorysize"
    assert value(s, purgatory, delayedoperation="Fetch") == 2
    assert value(s, "kafka_server_socketservermetrics_connection_count") == 4
    assert not any(name.endswith("_created") for name, _ in s)

    m.set_connection_source(lambda: 9)
    m.forget_topic("orders")
    s = parse(m.render().decode())
    assert value(s, "kafka_server_socketservermetrics_connection_count") == 9
    assert not any(dict(k[1]).get("topic") == "orders" and "brokertopicmetrics" in k[0] for k in s)


def test_a_failing_source_does_not_break_the_scrape() -> None:
    m = BrokerMetrics()

    def broken() -> list[PartitionStats]:
        raise ValueError("boom")

    m.set_partition_source(broken)
    m.on_produce("t", 1, 1)
    s = parse(m.render().decode())
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total", topic="t") == 1


def test_two_instances_do_not_share_a_registry() -> None:
    a, b = BrokerMetrics(), BrokerMetrics()
    a.on_produce("t", 10, 1)
    assert value(parse(b.render().decode()), "kafka_server_brokertopicmetrics_bytesin_total", topic="t") == 0


def _closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def test_http_endpoint_in_a_thread() -> None:
    m = BrokerMetrics()
    m.on_fetch("t", 42)
    server = start_http_server("127.0.0.1", 0, m)
    try:
        assert server.port > 0
        assert value(scrape(server.port), "kafka_server_brokertopicmetrics_bytesout_total", topic="t") == 42
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=10)
        assert info.value.code == 404
    finally:
        server()
    assert _closed(server.port)


def test_http_endpoint_on_the_event_loop() -> None:
    async def run() -> None:
        m = BrokerMetrics()
        m.on_fetch("t", 7)
        server = start_http_server("127.0.0.1", 0, m)
        try:
            await asyncio.sleep(0)
            s = await asyncio.to_thread(scrape, server.port)
            assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="t") == 7
        finally:
            server.stop()
        await asyncio.sleep(0.05)
        assert _closed(server.port)

    asyncio.run(run())


def _open_sockets() -> int:
    return sum(1 for fd in os.listdir("/proc/self/fd") if _is_socket(fd))


def _is_socket(fd: str) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:
        return False


def test_scrapers_that_do_not_read_are_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients ask for a page of metrics larger than a socket holds and never read it: the endpoint (on the
    broker's loop) drops each once it has taken nothing for the write time, and serves a real scrape meanwhile."""
    monkeypatch.setattr(metrics_http, "_WRITE_TIMEOUT_S", 0.5, raising=False)

    async def run() -> None:
        m = BrokerMetrics()
        for i in range(12000):
            m.on_fetch(f"topic-with-a-long-name-{i:05d}", i)
        assert len(m.render()) > 3 * 1024 * 1024
        server = start_http_server("127.0.0.1", 0, m)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(0)
            before = _open_sockets()
            peers = []
            for _ in range(3):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.setblocking(False)
                await loop.sock_connect(sock, ("127.0.0.1", server.port))
                await loop.sock_sendall(sock, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                peers.append(sock)
            s = await asyncio.to_thread(scrape, server.port)
            assert value(s, "kafka_server_brokertopicmetrics_bytesout_total", topic="topic-with-a-long-name-00007") == 7
            deadline = loop.time() + 10
            while _open_sockets() > before + len(peers):  # the endpoint's side of each is closed
                assert loop.time() < deadline, "the endpoint kept the connections of clients that do not read"
                await asyncio.sleep(0.05)
            for sock in peers:
                sock.close()
        finally:
            server.stop()

    asyncio.run(run())


# ------------------------------------------------------------------------------------------ a real broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(command: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        [sys.executable, "-m", f"rill.cli.{command}", *args], input=stdin, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_broker_counters_move_by_the_amounts_sent() -> None:
    testing = pytest.importorskip("rill.testing")
    metrics_port = _free_port()
    with testing.broker({"metrics.port": str(metrics_port)}) as broker:
        bs = ["--bootstrap-server", broker.bootstrap_servers]
        topic = f"metrics-{uuid.uuid4().hex[:8]}"
        _cli("topics", "create", topic, "--partitions", "1", *bs)
        before = scrape(metrics_port)
        n = 500
        payload = b"".join(b"record-%05d\n" % i for i in range(n))
        _cli("produce", topic, "--acks", "all", *bs, stdin=payload)
        during = scrape(metrics_port)

        messages_in = value(during, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) - value(
            before, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic
        )
        assert messages_in == n
        bytes_in = value(during, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
        assert n * len(b"record-00000") < bytes_in < n * len(b"record-00000") * 4
        tp = {"topic": topic, "partition": "0"}
        assert value(during, "kafka_log_log_logendoffset", **tp) == n
        assert value(during, "kafka_log_log_highwatermark", **tp) == n
        assert value(during, "kafka_log_log_numlogsegments", **tp) >= 1
        assert value(during, "kafka_log_log_size", **tp) >= bytes_in
        produce_requests = "kafka_network_requestmetrics_requests_total"
        assert value(during, produce_requests, request="Produce") > value(before, produce_requests, request="Produce")
        assert value(during, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce") >= 1
        # A single broker leads what it hosts, with nothing under-replicated, and is its own controller.
        assert (
            value(during, "kafka_server_replicamanager_leadercount")
            == value(during, "kafka_server_replicamanager_partitioncount")
            >= 1
        )
        assert value(during, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert value(during, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert value(during, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0

        group = f"g-{uuid.uuid4().hex[:8]}"
        out = _cli("consume", topic, "--group", group, "--from-beginning", "--count", "200", *bs)
        assert len(out.stdout.splitlines()) == 200
        after = scrape(metrics_port)
        assert value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= bytes_in * 0.3
        deadline = time.monotonic() + 10
        labels = {"consumergroup": group, **tp}
        while value(after, "kafka_consumergroup_current_offset", **labels) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
            after = scrape(metrics_port)
        assert value(after, "kafka_consumergroup_current_offset", **labels) == 200
        assert value(after, "kafka_consumergroup_lag", **labels) == n - 200
        assert value(after, "kafka_server_socketservermetrics_connection_count") >= 0


def test_partition_errors_are_counted_by_code() -> None:
    from tests.integration.broker._wire import Wire

    from rill.protocol import ApiKey
    from rill.records.builder import build_batch
    from rill.records.record import Record

    testing = pytest.importorskip("rill.testing")
    metrics_port = _free_port()
    with testing.broker({"metrics.port": str(metrics_port), "auto.create.topics.enable": "false"}) as broker:
        w = Wire(broker.bootstrap_servers)
        batch = build_batch([Record(0, 1_700_000_000_000, b"k", b"v", [])])
        for _ in range(3):
            w.call(
                ApiKey.PRODUCE,
                9,
                {
                    "transactional_id": None,
                    "acks": 1,
                    "timeout_ms": 1000,
                    "topic_data": [{"name": "missing", "partition_data": [{"index": 0, "records": batch}]}],
                },
            )
        w.call(
            ApiKey.FETCH,
            11,
            {
                "max_wait_ms": 0,
                "min_bytes": 0,
                "topics": [
                    {
                        "topic": "missing",
                        "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}],
                    }
                ],
            },
        )
        w.close()
        s = scrape(metrics_port)
        errors = "kafka_network_requestmetrics_errors_total"
        assert value(s, errors, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 3
        assert value(s, errors, request="Fetch", error="UNKNOWN_TOPIC_OR_PARTITION") == 1


def test_the_implementations_in_use_are_logged_and_exported(caplog: pytest.LogCaptureFixture) -> None:
    """Whether the record scanner runs compiled or as its pure-Python twin: one INFO line at start and
    ``rill_implementation_info`` at the metrics endpoint."""
    from rill import testing
    from rill.records import scan

    expected = "compiled" if scan.ACCELERATED else "python"
    other = "python" if scan.ACCELERATED else "compiled"
    caplog.set_level(logging.INFO, logger="rill.broker")
    metrics_port = _free_port()
    with testing.broker({"metrics.port": str(metrics_port)}):
        s = scrape(metrics_port)
    name = "rill_implementation_info"
    assert value(s, name, module="rill.records.scan", implementation=expected) == 1
    assert (name, (("implementation", other), ("module", "rill.records.scan"))) not in s
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Implementations:")]
    assert lines == [f"Implementations: rill.records.scan {expected}"]


def test_the_pure_python_scanner_is_exported_as_such(monkeypatch: pytest.MonkeyPatch) -> None:
    from rill.records import scan

    monkeypatch.setattr(scan, "ACCELERATED", False)  # as where the package was installed without a compiler
    s = parse(BrokerMetrics().render().decode())
    assert value(s, "rill_implementation_info", module="rill.records.scan", implementation="python") == 1
    assert value(s, "rill_implementation_info", module="rill.records.scan", implementation="compiled") == 0
