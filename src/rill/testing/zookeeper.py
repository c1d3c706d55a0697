"""Throwaway Apache ZooKeeper servers for tests: one standalone server or a quorum ensemble.

    from kazoo.client import KazooClient
    from rill.testing.zookeeper import ZooKeeperEnsemble

    with ZooKeeperEnsemble(3, tick_ms=200) as zk:
        client = KazooClient(hosts=zk.connect_string)
        client.start()
        zk.kill(zk.leader())  # SIGKILL; the other two elect a new leader

Each server is a plain ``java`` process (``ZooKeeperServerMain`` for one server,
``QuorumPeerMain`` with ``server.N`` lines and ``myid`` files for more) listening on free 127.0.0.1
ports, with its own directory ``server-N`` (``zoo.cfg``, ``zookeeper.log``, ``data/``) under a
temporary directory, or under ``data_dir`` when one is given. ``host`` and ``command_prefix``
(``ip netns exec NAME``) run the servers in a network namespace of their own, on that namespace's
address and ZooKeeper's usual ports (2181, 2888, 3888, plus the server index). Servers are numbered from 0 in this
API (``kill(0)``); their ZooKeeper ``myid`` is the index plus one. A server counts as ready once the
``srvr`` four-letter command shows its ``Mode:`` (standalone, leader or follower): the client port
opens earlier than that.

``jvm_options`` adds ``-D`` options to the servers' command line (a JAAS file for SASL authentication, say);
``secure_client_port=True`` gives each server a TLS port too (Netty, ``secure_connect_string``), the ``ssl.*``
lines of its key and trust stores coming in ``config``; the plain port stays for the four-letter probes.

``tick_ms`` is ZooKeeper's ``tickTime``: sessions last between 2 and 20 ticks, so a small tick
allows short session timeouts for fast expiry tests. ``init_limit`` and ``sync_limit`` count ticks.

Leaving the ``with`` block (or ``close()``) stops every server, even after an error, and removes the
temporary directory (a given ``data_dir`` is kept). ``config`` adds or overrides ``zoo.cfg`` lines; the
defaults include ``forceSync=no``: a killed server loses nothing, only a machine crash would.

Servers never outlive the test process: each is started with ``PR_SET_PDEATHSIG`` (SIGKILL), from one
thread that lives as long as the process, as the signal fires when the *thread* that started the
child ends. After such a hard death the temporary directory stays behind. The Debian layout is
expected: ``java`` on the PATH (or under ``JAVA_HOME``) and ``/usr/share/java/zookeeper.jar``
(``apt-get install zookeeper``), whose manifest names the jars it needs, plus ``slf4j-simple.jar``
so that the servers' logs reach their log files.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import re
import shutil
import signal
import socket
import subprocess as sp
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["ZooKeeperEnsemble", "ZooKeeperError", "find_java", "four_letter_word", "server_classpath"]

JAVA_DIR = Path("/usr/share/java")
ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"  # its manifest's Class-Path lists netty, jute, slf4j-api, ...
SLF4J_SIMPLE_JAR = JAVA_DIR / "slf4j-simple.jar"
STANDALONE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
QUORUM_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
NETTY_SERVER_JARS = ("netty-codec.jar", "netty-resolver.jar", "netty-transport-native-unix-common.jar")
FOUR_LETTER_WORDS = "ruok,srvr,mntr,stat,conf"
JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",  # C1 only: the JVM starts faster
    "-Xshare:auto",
    "-XX:-UsePerfData",  # no hsperfdata file in /tmp
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
)
LOG_NAME = "zookeeper.log"
_MODE = re.compile(r"^Mode: (\w+)", re.MULTILINE)
_PR_SET_PDEATHSIG = 1


class ZooKeeperError(RuntimeError):
    """ZooKeeper is not installed, or a server did not come up; the message says why."""


def find_java() -> str:
    """The ``java`` executable: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home, "bin", "java"), os.X_OK):
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise ZooKeeperError("java not found (JAVA_HOME unset, none on the PATH): apt-get install default-jre-headless")
    return found


def server_classpath() -> str:
    """The class path of a ZooKeeper server with its log going to stderr (slf4j-simple)."""
    if not ZOOKEEPER_JAR.is_file():
        raise ZooKeeperError(f"ZooKeeper is not installed ({ZOOKEEPER_JAR} is missing): apt-get install zookeeper")
    if not SLF4J_SIMPLE_JAR.is_file():
        raise ZooKeeperError(f"{SLF4J_SIMPLE_JAR} is missing: apt-get install libslf4j-java")
    return f"{ZOOKEEPER_JAR}:{SLF4J_SIMPLE_JAR}"


def four_letter_word(port: int, word: str = "srvr", timeout: float = 1.0, host: str = "127.0.0.1") -> str:
    """The reply of the server on ``host``:``port`` to a four-letter command; ``OSError`` if none."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(word.encode("ascii"))
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (held together while they are chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


_Request = tuple[Callable[[], sp.Popen[bytes]], Future[sp.Popen[bytes]]]


class _Spawner:
    """Starts children from one daemon thread that lives as long as the process (a new one after a fork)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: queue.SimpleQueue[_Request] = queue.SimpleQueue()

    def popen(self, start: Callable[[], sp.Popen[bytes]]) -> sp.Popen[bytes]:
        with self._lock:
            if self._pid != os.getpid():
                self._queue = queue.SimpleQueue()
                threading.Thread(target=self._run, args=(self._queue,), name="zookeeper-spawner", daemon=True).start()
                self._pid = os.getpid()
            result: Future[sp.Popen[bytes]] = Future()
            self._queue.put((start, result))
        return result.result()

    @staticmethod
    def _run(requests: queue.SimpleQueue[_Request]) -> None:
        while True:
            start, result = requests.get()
            try:
                result.set_result(start())
            except BaseException as e:
                result.set_exception(e)


_SPAWNER = _Spawner()
os.register_at_fork(after_in_child=_SPAWNER.reset)  # a lock held by a parent's thread would never be let go


def _die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGKILL when the thread that forked it ends."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork: the child only calls it
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent died before prctl
            os._exit(1)

    return preexec


@dataclass
class _Server:
    index: int
    client_port: int
    quorum_port: int
    election_port: int
    directory: Path
    secure_port: int = 0
    proc: sp.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_NAME

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on 127.0.0.1; see the module docstring."""

    def __init__(
        self,
        size: int = 1,
        *,
        tick_ms: int = 2000,
        init_limit: int = 10,
        sync_limit: int = 5,
        data_dir: str | Path | None = None,
        startup_timeout: float = 30.0,
        config: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
        jvm_options: Sequence[str] = (),
        secure_client_port: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError(f"an ensemble has at least one server, not {size}")
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be positive, not {tick_ms}")
        self.size = size
        self.tick_ms = tick_ms
        self.host = host
        self._command_prefix = list(command_prefix)  # ``ip netns exec NAME``: the servers run in that namespace
        self._jvm_options = list(jvm_options)  # -D options: a JAAS file for SASL, say
        self._secure = secure_client_port
        self.startup_timeout = startup_timeout
        self._java = find_java()
        self._classpath = server_classpath()
        self._owner_pid = os.getpid()
        self._temporary = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="rill-zookeeper-")) if data_dir is None else Path(data_dir)
        self._servers = [_Server(i, 0, 0, 0, self.data_dir / f"server-{i + 1}") for i in range(size)]
        self._assign_ports()
        self._started = False  # once started, a server keeps its ports: clients know them
        self._config = {
            "tickTime": str(tick_ms),
            "initLimit": str(init_limit),
            "syncLimit": str(sync_limit),
            "clientPortAddress": host,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": FOUR_LETTER_WORDS,
            "forceSync": "no",
            "preAllocSize": "4096",  # KiB per transaction log file, not 64 MiB
            **(config or {}),
        }

    @property
    def connect_string(self) -> str:
        """``HOST:PORT,...`` of every server, what ZooKeeper clients are given."""
        return ",".join(self.connect_string_for(i) for i in range(self.size))

    @property
    def secure_connect_string(self) -> str:
        """``HOST:PORT,...`` of every server's TLS port (``secure_client_port=True``; the ``ssl.*`` lines of the
        servers' key and trust stores come in ``config``)."""
        if not self._secure:
            raise ZooKeeperError("the servers have no TLS port: start them with secure_client_port=True")
        return ",".join(f"{self.host}:{s.secure_port}" for s in self._servers)

    def connect_string_for(self, i: int) -> str:
        return f"{self.host}:{self._servers[i].client_port}"

    def client_port(self, i: int) -> int:
        return self._servers[i].client_port

    def log_path(self, i: int) -> Path:
        return self._servers[i].log_path

    def pid(self, i: int) -> int | None:
        proc = self._servers[i].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def __enter__(self) -> ZooKeeperEnsemble:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self, i: int | None = None) -> None:
        """Start server ``i`` (default: every server that is not running) and wait until it serves."""
        indexes = self._indexes(i)
        for attempt in range(3):
            for index in indexes:
                if not self._servers[index].running():
                    self._launch(self._servers[index])
            try:
                self.wait_ready(indexes)
                break
            except ZooKeeperError as e:
                # A port chosen free was taken before the server bound it: try others, while no client knows them.
                if self._started or attempt == 2 or "Address already in use" not in str(e):
                    raise
                self.stop()
                self._assign_ports()
        self._started = True

    def stop(self, i: int | None = None, timeout: float = 10.0) -> None:
        """Stop server ``i`` (default: all) with SIGTERM, SIGKILL after ``timeout`` seconds. Data stays."""
        if os.getpid() != self._owner_pid:  # a forked child's copy: the servers are its parent's
            return
        servers = [self._servers[k] for k in self._indexes(i)]
        for server in servers:
            if server.running():
                assert server.proc is not None
                server.proc.terminate()
                server.proc.send_signal(signal.SIGCONT)  # a paused server must run to handle SIGTERM
        for server in servers:
            self._reap(server, timeout)

    def close(self) -> None:
        """Stop every server and remove the directory if it is a temporary one (SIGKILL then: its data goes)."""
        if os.getpid() != self._owner_pid:
            return
        try:
            if self._temporary:
                for i in range(self.size):
                    self.kill(i)
            else:
                self.stop(timeout=5.0)
        finally:
            if self._temporary:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self, i: int) -> None:
        """SIGKILL server ``i`` and wait until it is gone."""
        server = self._servers[i]
        if server.running():
            assert server.proc is not None
            server.proc.kill()
        self._reap(server, 10.0)

    def restart(self, i: int) -> None:
        """Stop server ``i`` (if it runs), start it again on the same ports and data, wait until it serves."""
        self.stop(i)
        self.start(i)

    def pause(self, i: int) -> None:
        """SIGSTOP server ``i``: its sockets stay open but it answers nothing, like a hung machine."""
        self._signal(i, signal.SIGSTOP)

    def resume(self, i: int) -> None:
        self._signal(i, signal.SIGCONT)

    def mode(self, i: int, timeout: float = 1.0) -> str | None:
        """``standalone``, ``leader`` or ``follower`` from ``srvr``; ``None`` if server ``i`` is not serving."""
        if not self._servers[i].running():
            return None
        try:
            reply = four_letter_word(self._servers[i].client_port, "srvr", timeout, self.host)
        except OSError:
            return None
        found = _MODE.search(reply)
        return found.group(1) if found else None

    def leader(self, timeout: float = 30.0) -> int:
        """The index of the server that leads (the only server of a standalone one), waiting for one."""
        deadline = time.monotonic() + timeout
        while True:
            leaders = [i for i in range(self.size) if self.mode(i, 0.5) in ("leader", "standalone")]
            if len(leaders) == 1:
                return leaders[0]
            if time.monotonic() >= deadline:
                modes = {i: self.mode(i, 0.5) for i in range(self.size)}
                raise ZooKeeperError(f"no single leader within {timeout}s: modes {modes}")
            time.sleep(0.05)

    def wait_ready(self, indexes: Sequence[int] | None = None, timeout: float | None = None) -> None:
        """Wait until the servers ``indexes`` (default: all) show a mode; ``ZooKeeperError`` with their log if not."""
        pending = list(range(self.size) if indexes is None else indexes)
        limit = self.startup_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while pending:
            for index in list(pending):
                server = self._servers[index]
                if server.proc is None:
                    raise ZooKeeperError(f"ZooKeeper server {index} is not started")
                code = server.proc.poll()
                if code is not None:
                    raise ZooKeeperError(
                        f"ZooKeeper server {index} (port {server.client_port}) exited with code {code} before it "
                        f"served; the end of its log:\n{self.log_tail(index)}"
                    )
                if self.mode(index, 0.5) is not None:
                    pending.remove(index)
            if not pending:
                return
            if time.monotonic() >= deadline:
                index = pending[0]
                raise ZooKeeperError(
                    f"ZooKeeper server {index} (port {self._servers[index].client_port}) did not serve within "
                    f"{limit}s (no Mode: in its srvr reply); the end of its log:\n{self.log_tail(index)}"
                )
            time.sleep(0.05)

    def log_tail(self, i: int, lines: int = 40) -> str:
        try:
            return "\n".join(self._servers[i].log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _indexes(self, i: int | None) -> list[int]:
        if i is None:
            return list(range(self.size))
        if not 0 <= i < self.size:
            raise IndexError(f"server index {i} out of range for {self.size} servers")
        return [i]

    def _assign_ports(self) -> None:
        if self._command_prefix:  # a network namespace of the ensemble's own: ZooKeeper's usual ports are free
            ports = [p + i for i in range(self.size) for p in (2181, 2888, 3888)]
        else:
            ports = free_ports(4 * self.size)
        for server in self._servers:
            server.client_port, server.quorum_port, server.election_port = ports[
                3 * server.index : 3 * server.index + 3
            ]
            server.secure_port = ports[3 * self.size + server.index] if len(ports) > 3 * self.size else 0

    def _signal(self, i: int, sig: signal.Signals) -> None:
        server = self._servers[i]
        if not server.running():
            raise ZooKeeperError(f"ZooKeeper server {i} is not running")
        assert server.proc is not None
        server.proc.send_signal(sig)

    def _write_config(self, server: _Server) -> Path:
        data = server.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        lines = {**self._config, "dataDir": str(data), "clientPort": str(server.client_port)}
        if self._secure:  # the plain port stays: the four-letter probes use it
            lines["secureClientPort"] = str(server.secure_port)
            lines["serverCnxnFactory"] = "org.apache.zookeeper.server.NettyServerCnxnFactory"
        if self.size > 1:
            (data / "myid").write_text(f"{server.index + 1}\n")
            for other in self._servers:
                lines[f"server.{other.index + 1}"] = f"{self.host}:{other.quorum_port}:{other.election_port}"
        path = server.directory / "zoo.cfg"
        path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return path

    def _launch(self, server: _Server) -> None:
        config = self._write_config(server)
        main = QUORUM_MAIN if self.size > 1 else STANDALONE_MAIN
        classpath = self._classpath
        if self._secure:  # Debian's manifest leaves out the netty jars that the Netty server factory needs too
            classpath += "".join(f":{JAVA_DIR / jar}" for jar in NETTY_SERVER_JARS if (JAVA_DIR / jar).is_file())
        args = [*self._command_prefix, self._java, *JVM_OPTIONS, *self._jvm_options, "-cp", classpath, main,
                str(config)]  # fmt: skip
        log: Any = open(server.log_path, "ab")  # noqa: SIM115 - closed once the child has its copy
        try:
            preexec = _die_with_parent()
            server.proc = _SPAWNER.popen(
                lambda: sp.Popen(
                    args,
                    stdin=sp.DEVNULL,
                    stdout=log,
                    stderr=sp.STDOUT,
                    cwd=server.directory,
                    preexec_fn=preexec,
                    start_new_session=True,  # out of reach of a terminal's Ctrl-C: stopped by its owner, in order
                )
            )
        finally:
            log.close()

    @staticmethod
    def _reap(server: _Server, timeout: float) -> None:
        proc = server.proc
        if proc is None:
            return
        try:
            proc.wait(timeout)
        except sp.TimeoutExpired:
            proc.kill()
            proc.wait(10.0)
