"""A request interceptor between brokers, for tests: a TCP proxy in the test process, in front of one broker.

The brokers of a test cluster find each other at the inter-broker endpoint each one registers in ZooKeeper.
``rill.testing.cluster.cluster(..., interceptors=True)`` gives every broker a second listener, ``REPLICATION``,
for the traffic between brokers, and has it advertise the address of a :class:`RequestInterceptor` that forwards
to that listener; clients keep the ``PLAINTEXT`` listener. ``TestCluster.interceptor(i)`` is then the proxy of
the requests sent *to* broker ``i`` by the other brokers (replica fetches, OffsetForLeaderEpoch, transaction
markers, ...). The brokers run no code of it: unused, it forwards frames and costs the tests nothing else.

Each frame is forwarded whole. A :class:`Rule` added to the proxy picks requests by API key, by the broker that
sends them (read from the client id the brokers use, ``broker-<id>-...``) and by an optional predicate on the
decoded request, and does one thing to them:

- ``hold``: the request (and every later one on its connection, as TCP keeps them in order) waits until the
  test calls ``release()``; ``wait()`` returns once one has arrived, so a race becomes two steps in a test;
- ``delay``: the same, for a given time;
- ``fail``: the connection is cut instead of forwarding it (the sender sees a disconnection);
- ``rewrite_request`` / ``rewrite_response``: the decoded body goes through a function and is encoded again
  at the same version.

Rules apply ``times`` times (None: until removed). ``count(api_key, source)`` tells how many requests of a kind
went through, to measure how often a broker sends them.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rill.protocol import decode_request, decode_request_header, decode_response, encode_request, encode_response

_SOURCE = re.compile(r"^broker-(\d+)-")


@dataclass(frozen=True, slots=True)
class Intercepted:
    """One request a rule matched: its header, the broker that sent it (None: not a broker) and its body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    source: int | None
    body: dict[str, Any]


def _source(client_id: str | None) -> int | None:
    m = _SOURCE.match(client_id or "")
    return int(m.group(1)) if m else None


@dataclass(eq=False)
class Rule:
    """What to do with the requests of one kind; see the module docstring."""

    api_key: int
    action: str  # "hold", "delay", "fail", "rewrite_request", "rewrite_response"
    source: int | None = None
    predicate: Callable[[Intercepted], bool] | None = None
    times: int | None = 1
    delay_s: float = 0.0
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    matched: list[Intercepted] = field(default_factory=list)
    _released: threading.Event = field(default_factory=threading.Event)
    _arrived: threading.Condition = field(default_factory=threading.Condition)
    _proxy: RequestInterceptor | None = None

    def wait(self, count: int = 1, timeout: float = 30.0) -> Intercepted:
        """Wait until ``count`` requests matched; returns the last of them (TimeoutError after ``timeout``)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.matched) >= count, timeout):
                raise TimeoutError(f"{count} request(s) of API {self.api_key} did not come within {timeout:g} s")
            return self.matched[count - 1]

    def release(self) -> None:
        """Let the held requests go on, and hold no more."""
        self.remove()
        self._released.set()

    def remove(self) -> None:
        if self._proxy is not None:
            self._proxy._remove(self)

    def _take(self, request: Intercepted) -> bool:
        """Whether this rule applies to ``request`` (counted when it does)."""
        if request.api_key != self.api_key or (self.source is not None and request.source != self.source):
            return False
        if self.predicate is not None and not self.predicate(request):
            return False
        with self._arrived:
            if self.times is not None and len(self.matched) >= self.times:
                return False
            self.matched.append(request)
            self._arrived.notify_all()
        return True


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _read_frame(sock: socket.socket) -> bytes:
    """One frame without its size prefix."""
    size = int.from_bytes(_read_exact(sock, 4), "big", signed=True)
    if size < 0:
        raise ConnectionError(f"invalid frame size {size}")
    return _read_exact(sock, size)


def _sized(frame: bytes) -> bytes:
    return len(frame).to_bytes(4, "big") + frame


class _Link:
    """One connection through the proxy: the sender's socket and the one to the broker, pumped by two threads."""

    def __init__(self, proxy: RequestInterceptor, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.pending: dict[int, tuple[int, int, Rule | None]] = {}  # correlation id -> (api key, version, rule)
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.proxy._forget(self)
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def requests(self) -> None:
        try:
            while True:
                frame = _read_frame(self.client)
                self.upstream.sendall(_sized(self.proxy._on_request(self, frame)))
        except (OSError, ConnectionError, _Cut):
            pass
        finally:
            self.close()

    def responses(self) -> None:
        try:
            while True:
                frame = _read_frame(self.upstream)
                self.client.sendall(_sized(self.proxy._on_response(self, frame)))
        except (OSError, ConnectionError):
            pass
        finally:
            self.close()


class _Cut(Exception):
    """A ``fail`` rule matched: the link is closed."""


class RequestInterceptor:
    """A TCP proxy on a free 127.0.0.1 port forwarding to ``(host, port)``; see the module docstring."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._rules: list[Rule] = []
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._counts: Counter[tuple[int, int | None]] = Counter()
        self._closed = False
        threading.Thread(target=self._accept, name=f"interceptor-{self.port}", daemon=True).start()

    # -- rules -----------------------------------------------------------------------------------------

    def add(self, rule: Rule) -> Rule:
        rule._proxy = self
        with self._lock:
            self._rules.append(rule)
        return rule

    def hold(self, api_key: int, *, source: int | None = None, predicate: Callable[[Intercepted], bool] | None = None,
             times: int | None = 1) -> Rule:  # fmt: skip
        """Hold the next ``times`` matching requests (None: every one) until ``release()``."""
        return self.add(Rule(api_key, "hold", source, predicate, times))

    def delay(self, api_key: int, seconds: float, *, source: int | None = None,
              predicate: Callable[[Intercepted], bool] | None = None, times: int | None = 1) -> Rule:  # fmt: skip
        return self.add(Rule(api_key, "delay", source, predicate, times, delay_s=seconds))

    def fail(self, api_key: int, *, source: int | None = None, predicate: Callable[[Intercepted], bool] | None = None,
             times: int | None = 1) -> Rule:  # fmt: skip
        """Cut the connection when a matching request comes (it is not forwarded)."""
        return self.add(Rule(api_key, "fail", source, predicate, times))

    def rewrite_request(self, api_key: int, fn: Callable[[dict[str, Any]], dict[str, Any]], *,
                        source: int | None = None, predicate: Callable[[Intercepted], bool] | None = None,
                        times: int | None = None) -> Rule:  # fmt: skip
        return self.add(Rule(api_key, "rewrite_request", source, predicate, times, rewrite=fn))

    def rewrite_response(self, api_key: int, fn: Callable[[dict[str, Any]], dict[str, Any]], *,
                         source: int | None = None, predicate: Callable[[Intercepted], bool] | None = None,
                         times: int | None = None) -> Rule:  # fmt: skip
        return self.add(Rule(api_key, "rewrite_response", source, predicate, times, rewrite=fn))

    def clear(self) -> None:
        """Remove every rule and release what they hold."""
        with self._lock:
            rules, self._rules = self._rules, []
        for rule in rules:
            rule._released.set()

    def count(self, api_key: int, source: int | None = None) -> int:
        """Requests of ``api_key`` forwarded so far (from broker ``source``, or from anyone)."""
        with self._lock:
            if source is not None:
                return self._counts[(api_key, source)]
            return sum(n for (key, _), n in self._counts.items() if key == api_key)

    def cut(self) -> None:
        """Close every connection through the proxy (new ones are accepted)."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()

    def close(self) -> None:
        self._closed = True
        self.clear()
        with contextlib.suppress(OSError):
            self._server.close()
        self.cut()

    def __enter__(self) -> RequestInterceptor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _remove(self, rule: Rule) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._rules.remove(rule)

    # -- forwarding --------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(self, client, upstream)
            with self._lock:
                self._links.add(link)
            threading.Thread(target=link.requests, daemon=True).start()
            threading.Thread(target=link.responses, daemon=True).start()

    def _on_request(self, link: _Link, frame: bytes) -> bytes:
        header, pos = decode_request_header(frame)
        source = _source(header.client_id)
        with self._lock:
            self._counts[(header.api_key, source)] += 1
            rules = [r for r in self._rules if r.api_key == header.api_key]
        rule: Rule | None = None
        if rules:
            body = decode_request(header.api_key, header.api_version, frame, pos)
            request = Intercepted(header.api_key, header.api_version, header.correlation_id, header.client_id,
                                  source, body)  # fmt: skip
            rule = next((r for r in rules if r._take(request)), None)
            if rule is not None:
                if rule.times is not None and len(rule.matched) >= rule.times and rule.action != "hold":
                    rule.remove()
                if rule.action == "hold":
                    rule._released.wait()
                elif rule.action == "delay":
                    time.sleep(rule.delay_s)
                elif rule.action == "fail":
                    raise _Cut()
                elif rule.action == "rewrite_request" and rule.rewrite is not None:
                    frame = encode_request(header.api_key, header.api_version, header.correlation_id,
                                           header.client_id, rule.rewrite(body))[4:]  # fmt: skip
        response_rule = rule if rule is not None and rule.action == "rewrite_response" else None
        with link.lock:
            link.pending[header.correlation_id] = (header.api_key, header.api_version, response_rule)
        return frame

    def _on_response(self, link: _Link, frame: bytes) -> bytes:
        corr = int.from_bytes(frame[:4], "big", signed=True)
        with link.lock:
            api_key, version, rule = link.pending.pop(corr, (-1, -1, None))
        if rule is None or rule.rewrite is None:
            return frame
        _, body = decode_response(api_key, version, frame)
        chunks = encode_response(api_key, version, corr, rule.rewrite(body))
        return b"".join(bytes(c) for c in chunks)[4:]  # type: ignore[arg-type]
