"""Kafka's connection limits over real sockets: max.connections.per.ip (and its overrides) refuses a
client address at its limit, max.connections holds new connections until one closes, and both
follow dynamic broker configs set by a real admin client."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from tests.integration.broker._wire import Wire

from rill.config import ConfigError
from rill.config.broker_config import BrokerConfig, per_ip_overrides
from rill.protocol import ApiKey, decode_response, encode_request
from rill.testing import broker

pytestmark = pytest.mark.timeout(90)


class Client(Wire):
    """A raw connection from a chosen loopback address, calling ApiVersions."""

    def __init__(self, port: int, source: str = "127.0.0.1") -> None:
        super().__init__(f"127.0.0.1:{port}", timeout=5, source=source)

    def send_api_versions(self) -> None:
        self._corr += 1
        self.send_raw(encode_request(ApiKey.API_VERSIONS, 0, self._corr, "limits-test", {}))

    def read_api_versions(self) -> int:
        corr, resp = decode_response(ApiKey.API_VERSIONS, 0, self.read_frame())
        assert corr == self._corr
        return int(resp["error_code"])

    def served(self) -> bool:
        """True when an ApiVersions call is answered; False when the broker closed the connection."""
        try:
            self.send_api_versions()
            return self.read_api_versions() == 0
        except (ConnectionError, OSError):
            return False


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_an_address_at_max_connections_per_ip_is_refused_and_others_are_not() -> None:
    with broker({"max.connections.per.ip": "2"}) as b:
        first, second = Client(b.port), Client(b.port)
        assert first.served() and second.served()
        third = Client(b.port)  # the TCP handshake completes; the broker closes it at once
        assert not third.served()
        other = Client(b.port, source="127.0.0.2")  # another client address has its own count
        assert other.served()
        first.close()
        server = b.broker._server
        wait_for(lambda: server.quotas.count("127.0.0.1") == 1)
        again = Client(b.port)
        assert again.served() and second.served()
        for c in (second, third, other, again):
            c.close()


def test_per_ip_overrides_set_the_limit_of_the_addresses_they_name() -> None:
    overrides = {"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "localhost:1,127.0.0.2:2"}
    with broker(overrides) as b:
        local = Client(b.port)
        assert local.served()
        assert not Client(b.port).served()  # localhost resolved to 127.0.0.1, limit 1
        named = [Client(b.port, source="127.0.0.2") for _ in range(3)]
        assert [c.served() for c in named] == [True, True, False]
        assert not Client(b.port, source="127.0.0.3").served()  # not named: the default, 0
        for c in (local, *named):
            c.close()


def test_a_broker_at_max_connections_holds_new_connections_until_one_closes() -> None:
    with broker({"max.connections": "2"}) as b:
        server = b.broker._server
        first, second = Client(b.port), Client(b.port)
        assert first.served() and second.served()
        held = Client(b.port)
        held.send_api_versions()
        wait_for(lambda: server.held_count == 1)
        held.sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            held.read_api_versions()  # not read while the broker is full
        held.sock.settimeout(5)
        first.close()
        assert held.read_api_versions() == 0  # taken in when a slot frees, its request then served
        assert server.connection_count == 2 and server.held_count == 0
        gone = Client(b.port)  # a held connection its client gives up is forgotten
        wait_for(lambda: server.held_count == 1)
        gone.close()
        wait_for(lambda: server.held_count == 0)
        for c in (second, held):
            c.close()


def _set_broker_configs(admin: AdminClient, **configs: str) -> None:
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(10)


def test_limits_follow_dynamic_broker_configs() -> None:
    with broker() as b:
        server = b.broker._server
        idle = [Client(b.port) for _ in range(3)]
        assert all(c.served() for c in idle)
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        admin.list_topics(timeout=10)
        wait_for(lambda: server.connection_count >= 4)
        # Lowering max.connections closes the connections idle the longest until the count fits;
        # the admin client's own connection, which just sent the change, stays.
        _set_broker_configs(admin, max_connections="1")
        wait_for(lambda: server.connection_count <= 1)
        assert not any(c.served() for c in idle)
        newcomer = Client(b.port)
        newcomer.send_api_versions()
        wait_for(lambda: server.held_count == 1)
        _set_broker_configs(admin, max_connections="10", max_connections_per_ip="3")
        assert newcomer.read_api_versions() == 0  # held until the limit rose
        more = [Client(b.port) for _ in range(3)]
        assert [c.served() for c in more] == [True, False, False]  # admin + newcomer + 1 = 3 per address
        with pytest.raises(Exception, match=r"max\.connections\.per\.ip can be 0 only"):
            _set_broker_configs(admin, max_connections_per_ip="0")
        with pytest.raises(Exception, match="is not host:count"):
            _set_broker_configs(admin, max_connections_per_ip_overrides="127.0.0.1")
        for c in (*idle, newcomer, *more):
            c.close()


def test_static_validation() -> None:
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip can be 0 only"):
        BrokerConfig.from_properties({"log.dir": "x", "max.connections.per.ip": "0"})
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides"):
        BrokerConfig.from_properties({"log.dir": "x", "max.connections.per.ip.overrides": "a:b"})
    assert per_ip_overrides(" 127.0.0.1:5 , [::1]:2,localhost:3") == {"127.0.0.1": 3, "::1": 2}
