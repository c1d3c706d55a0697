"""rill.testing.zookeeper: real ZooKeeper servers (Debian's zookeeper package) driven through kazoo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import rill.testing.zookeeper as zkmod
from rill.testing.zookeeper import ZooKeeperEnsemble, ZooKeeperError

Clients = Callable[[str], KazooClient]


@pytest.fixture
def kazoo_client() -> Iterator[Clients]:
    """Connected kazoo clients (session timeout 10 s), closed when the test ends."""
    made: list[KazooClient] = []

    def connect(hosts: str, timeout: float = 10.0) -> KazooClient:
        client = KazooClient(hosts=hosts, timeout=timeout)
        made.append(client)
        client.start(timeout=15)
        return client

    yield connect
    for client in made:
        client.stop()
        client.close()


def java_children() -> list[int]:
    """Pids of the java processes whose parent is this process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if comm == "java" and ppid == os.getpid():
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def write_until_done(client: KazooClient, path: str, limit: float) -> float:
    """Seconds until ``client.set(path)`` succeeds, retrying on any error for ``limit`` seconds."""
    started = time.monotonic()
    while True:
        try:
            client.set(path, b"after")
            return time.monotonic() - started
        except Exception:
            if time.monotonic() - started > limit:
                raise
            time.sleep(0.02)


def test_standalone_server_stores_znodes(zookeeper: ZooKeeperEnsemble, kazoo_client: Clients) -> None:
    assert zookeeper.mode(0) == "standalone"
    assert zookeeper.leader() == 0
    assert zookeeper.connect_string == zookeeper.connect_string_for(0)
    assert zookeeper.connect_string.startswith("127.0.0.1:")
    client = kazoo_client(zookeeper.connect_string)
    client.create("/rill/brokers/ids/1", b'{"host": "127.0.0.1"}', makepath=True)
    assert client.get("/rill/brokers/ids/1")[0] == b'{"host": "127.0.0.1"}'
    assert client.get_children("/rill/brokers/ids") == ["1"]
    assert "Mode: standalone" in zkmod.four_letter_word(zookeeper.client_port(0), "srvr")
    assert zookeeper.log_path(0).stat().st_size > 0  # slf4j-simple writes the server's log


def test_ensemble_elects_a_new_leader_when_the_leader_is_killed(kazoo_client: Clients) -> None:
    started = time.monotonic()
    with ZooKeeperEnsemble(3, tick_ms=500) as zk:
        print(f"3-server ensemble serving after {time.monotonic() - started:.2f}s")
        assert len(zk.connect_string.split(",")) == 3
        assert sorted(zk.mode(i) or "" for i in range(3)) == ["follower", "follower", "leader"]
        client = kazoo_client(zk.connect_string)
        client.create("/controller", b"before")
        old = zk.leader()
        zk.kill(old)
        assert zk.mode(old) is None and zk.pid(old) is None
        resumed = write_until_done(client, "/controller", limit=20)
        print(f"writes resumed {resumed:.2f}s after the leader was killed")
        assert resumed < 15
        new = zk.leader()
        assert new != old
        zk.restart(old)  # rejoins on the same port with its data, as a follower
        assert zk.mode(old) == "follower"
        assert zk.leader() == new
        rejoined = kazoo_client(zk.connect_string_for(old))
        rejoined.sync("/controller")
        assert rejoined.get("/controller")[0] == b"after"


def test_paused_server_is_left_behind_and_catches_up(kazoo_client: Clients) -> None:
    with ZooKeeperEnsemble(3, tick_ms=200) as zk:
        leader = zk.leader()
        # A follower paused: the other two still make a quorum.
        follower = (leader + 1) % 3
        zk.pause(follower)
        deadline = time.monotonic() + 5  # the stop reaches every thread of its JVM a moment later on a busy machine
        while zk.mode(follower, timeout=0.5) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert zk.mode(follower, timeout=0.5) is None
        other = 3 - leader - follower
        client = kazoo_client(zk.connect_string_for(other))
        client.create("/while-paused", b"1")
        zk.resume(follower)
        zk.wait_ready([follower], timeout=20)
        late = kazoo_client(zk.connect_string_for(follower))
        late.sync("/while-paused")
        assert late.get("/while-paused")[0] == b"1"
        # The leader paused: the followers stop hearing from it after syncLimit ticks and elect another.
        started = time.monotonic()
        zk.pause(leader)
        resumed = write_until_done(client, "/while-paused", limit=20)
        print(f"writes resumed {resumed:.2f}s after the leader was paused (syncLimit 5 x 200 ms)")
        assert zk.leader() != leader
        zk.resume(leader)
        # Back, it notices within a few ticks that it lost its quorum and follows the new leader.
        deadline = time.monotonic() + 20
        while zk.mode(leader) != "follower" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert zk.mode(leader) == "follower"
        assert time.monotonic() - started < 30


def test_ephemeral_node_of_a_killed_client_expires_with_its_session(kazoo_client: Clients) -> None:
    with ZooKeeperEnsemble(1, tick_ms=200) as zk:  # sessions of 0.4 s to 4 s allowed
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER, zk.connect_string],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert owner.stdout is not None
            line = owner.stdout.readline()
            assert line.startswith("session "), line
            session_ms = int(line.split()[1])
            assert 400 <= session_ms <= 4000
            watcher = kazoo_client(zk.connect_string)
            gone = threading.Event()
            assert watcher.exists("/registration", watch=lambda event: gone.set()) is not None
            killed = time.monotonic()
            owner.send_signal(signal.SIGKILL)
            owner.wait(10)
            assert gone.wait(15), "the ephemeral node outlived its session"
            expired = time.monotonic() - killed
        finally:
            owner.kill()
            owner.wait(10)
        print(f"ephemeral node gone {expired:.2f}s after its client was killed (session {session_ms} ms, tick 200 ms)")
        assert watcher.exists("/registration") is None
        # The session ended by timing out, not by a close: not before most of the timeout went by.
        assert session_ms / 1000 * 0.5 <= expired <= session_ms / 1000 + 3


OWNER = """
import sys, time
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1], timeout=1.0)
client.start(timeout=15)
client.create("/registration", b"broker", ephemeral=True)
print("session", client._session_timeout, flush=True)
time.sleep(120)
"""


def test_nothing_is_left_running_or_on_disk() -> None:
    with ZooKeeperEnsemble(3, tick_ms=500) as zk:
        pids = [zk.pid(i) for i in range(3)]
        assert all(pids)
        assert sorted(java_children()) == sorted(p for p in pids if p)
        zk.pause(0)  # stopping must not hang on a stopped process
        data_dir = zk.data_dir
        assert (data_dir / "server-2" / "data" / "myid").read_text().strip() == "2"
    assert java_children() == []
    assert not any(alive(p) for p in pids if p)
    assert not data_dir.exists()


def test_everything_is_stopped_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError, match="boom"), ZooKeeperEnsemble(1) as zk:
        pid, data_dir = zk.pid(0), zk.data_dir
        raise RuntimeError("boom")
    assert pid is not None and not alive(pid)
    assert java_children() == []
    assert not data_dir.exists()


def test_a_server_that_cannot_start_fails_with_its_log(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(1, config={"tickTime": "not-a-number"})
    data_dir = ensemble.data_dir
    with pytest.raises(
        ZooKeeperError, match=r"exited with code \d+ before it served; the end of its log:(?s:.*)not-a-number"
    ):
        ensemble.__enter__()
    assert java_children() == []
    assert not data_dir.exists()


def test_missing_zookeeper_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(zkmod, "ZOOKEEPER_JAR", tmp_path / "zookeeper.jar")
    with pytest.raises(ZooKeeperError, match="apt-get install zookeeper"):
        ZooKeeperEnsemble(1)


def test_servers_started_by_a_finished_thread_keep_running() -> None:
    # PR_SET_PDEATHSIG fires when the thread that forked the child ends: servers are forked by a thread
    # that lives as long as the process, not by the caller's.
    zk = ZooKeeperEnsemble(1)
    try:
        starter = threading.Thread(target=zk.start)
        starter.start()
        starter.join(60)
        assert zk.mode(0) == "standalone"
        time.sleep(0.3)
        assert zk.mode(0) == "standalone"
    finally:
        zk.close()


def test_servers_die_with_the_test_process(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "zk")], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 3 and all(alive(p) for p in pids)
    finally:
        parent.kill()  # SIGKILL: no cleanup code runs in it
        parent.wait(10)
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [p for p in pids if alive(p)]
    for pid in survivors:  # orphans: not this process's children, killed by their pid
        os.kill(pid, signal.SIGKILL)
    assert survivors == []


PARENT = """
import sys, time
from rill.testing.zookeeper import ZooKeeperEnsemble
zk = ZooKeeperEnsemble(3, tick_ms=500, data_dir=sys.argv[1])
zk.start()
print(*(zk.pid(i) for i in range(3)), flush=True)
time.sleep(120)
"""


def test_a_port_taken_before_the_first_start_is_replaced(monkeypatch: pytest.MonkeyPatch, busy_port: int) -> None:
    # Ports are chosen free and released for the server to bind: another process can take one meanwhile.
    real = zkmod.free_ports
    calls: list[int] = []

    def first_one_taken(count: int) -> list[int]:
        calls.append(count)
        ports = real(count)
        return [busy_port, *ports[1:]] if len(calls) == 1 else ports

    monkeypatch.setattr(zkmod, "free_ports", first_one_taken)
    with ZooKeeperEnsemble(1) as zk:
        assert len(calls) == 2
        assert zk.client_port(0) != busy_port
        assert zk.mode(0) == "standalone"
        assert "Address already in use" in zk.log_path(0).read_text()


def test_a_forked_child_leaves_the_servers_to_its_parent(zookeeper: ZooKeeperEnsemble) -> None:
    child = os.fork()
    if child == 0:  # e.g. multiprocessing's default on Linux: the child's copy must not stop the parent's server
        try:
            zookeeper.close()
        finally:
            os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert zookeeper.mode(0) == "standalone"
    assert zookeeper.data_dir.exists()


def test_a_paused_server_stops_at_once_and_a_given_directory_stays(tmp_path: Path) -> None:
    zk = ZooKeeperEnsemble(1, data_dir=tmp_path / "zk")
    try:
        zk.start()
        pid = zk.pid(0)
        zk.pause(0)
    finally:
        started = time.monotonic()
        zk.close()  # SIGTERM, and SIGCONT so that the paused JVM handles it
    assert time.monotonic() - started < 4  # not the 5 s after which SIGKILL would end it
    assert pid is not None and not alive(pid)
    assert (tmp_path / "zk" / "server-1" / "data" / "version-2").is_dir()
    assert "shutdown" in (tmp_path / "zk" / "server-1" / "zookeeper.log").read_text().lower()
