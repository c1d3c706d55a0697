"""The ZooKeeper fault seam (``rill.testing.zk_faults``) on a real server: each action does what it says to the
chosen call only, and session events are held, then delivered in order."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, RolledBackError

from rill.testing.zk_faults import Action, Fault, FaultInjectingKazooClient

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def client(connect: str, admin: KazooClient) -> Iterator[FaultInjectingKazooClient]:
    c = FaultInjectingKazooClient(hosts=connect, timeout=2.0)
    c.start(15)
    try:
        yield c
    finally:
        c.stop()
        c.close()


def test_fail_before_applying_and_apply_then_fail_act_on_the_nth_matching_call(
    client: FaultInjectingKazooClient, admin: KazooClient
) -> None:
    client.create("/a")
    lost = client.inject(Fault("create", "/a/*", Action.FAIL, nth=2))
    client.create("/a/1")
    with pytest.raises(ConnectionLoss):
        client.create("/a/2")
    assert admin.exists("/a/2") is None and lost.seen == 2 and lost.reached.is_set()
    client.create("/a/3")  # the fault acted once
    client.inject(Fault("set", "/a/1", Action.APPLY_THEN_FAIL))
    with pytest.raises(ConnectionLoss):
        client.set("/a/1", b"applied")
    assert admin.get("/a/1")[0] == b"applied"
    client.inject(Fault("delete", "/a/3", Action.FAIL, error=BadVersionError))
    with pytest.raises(BadVersionError):
        client.delete("/a/3")
    assert admin.exists("/a/3") is not None


def test_a_write_fault_reaches_a_transaction_holding_that_write(client: FaultInjectingKazooClient,
                                                                 admin: KazooClient) -> None:  # fmt: skip
    client.create("/epoch", b"0")
    client.inject(Fault("set", "/epoch", Action.FAIL, error=NodeExistsError))
    tx = client.transaction()
    tx.create("/x", b"")
    tx.set_data("/epoch", b"1", version=0)
    results = tx.commit()
    assert isinstance(results[0], RolledBackError) and isinstance(results[1], NodeExistsError)
    assert admin.exists("/x") is None
    client.inject(Fault("set", "/epoch", Action.APPLY_THEN_FAIL))
    tx = client.transaction()
    tx.create("/x", b"")
    tx.set_data("/epoch", b"1", version=0)
    with pytest.raises(ConnectionLoss):
        tx.commit()
    assert admin.exists("/x") is not None and admin.get("/epoch")[0] == b"1"
    client.inject(Fault("set", "/epoch", Action.FAIL, within_multi=False))
    tx = client.transaction()
    tx.set_data("/epoch", b"2", version=1)
    assert tx.commit()[0].version == 2  # a plain write's fault does not reach the transaction


def test_held_calls_and_held_answers_wait_for_release(client: FaultInjectingKazooClient, admin: KazooClient) -> None:
    client.create("/h", b"0")
    held = client.inject(Fault("set", "/h", Action.HOLD))
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            client.set("/h", b"1", version=0)
        except BaseException as e:
            errors.append(e)
        done.set()

    threading.Thread(target=write).start()
    held.wait_reached(10)
    admin.set("/h", b"other")  # meanwhile: the held write now fails its version check
    assert not done.wait(0.2)
    held.release()
    assert done.wait(10) and isinstance(errors[0], BadVersionError)
    answer = client.inject(Fault("get", "/h", Action.HOLD_ANSWER, watch=False))
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(client.get("/h")[0]))
    reader.start()
    assert answer.answered.wait(10)
    admin.set("/h", b"newer")
    answer.release()
    reader.join(10)
    assert got == [b"other"]  # read before the newer write, answered after it


def test_session_events_are_held_then_delivered_in_order_after_a_real_expiry(client: FaultInjectingKazooClient,
                                                                            admin: KazooClient) -> None:  # fmt: skip
    client.create("/eph", ephemeral=True)
    old = client.client_id[0]
    seen: list[str] = []
    client.add_listener(seen.append)
    client.hold_session_events()
    client.expire_session()
    client.wait_for_events(KazooState.LOST, KazooState.CONNECTED, timeout=20)
    assert seen == [] and admin.exists("/eph") is None
    assert client.client_id is not None and client.client_id[0] != old
    assert client.release_session_events()[-2:] == [KazooState.LOST, KazooState.CONNECTED]
    assert seen[-2:] == [KazooState.LOST, KazooState.CONNECTED]
