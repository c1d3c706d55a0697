"""The metadata store of a broker in a cluster: ZooKeeper (through kazoo) holds the truth.

Layout: :mod:`rill.metadata.zk_layout`. The broker registers itself (an ephemeral znode: a ``broker.id``
already registered by a live broker is refused; one left by a session not yet expired is waited out), keeps a
local image of the cluster (brokers, topics with their partitions'
leader, leader epoch, replicas, ISR and partition epoch, configs, the controller) and follows it through
ZooKeeper watches. Watch events arrive on kazoo's threads; they only mark what changed (a partition whose state
changed, or a whole topic), and one task on the event loop reads the marked znodes (in a worker thread) and
applies the differences to the image as :class:`~rill.metadata.store.MetadataDelta`s, in order, telling the
listeners (:mod:`rill.metadata.zk_follower`). No ZooKeeper round trip runs on the event loop's thread.

Changes are written to ZooKeeper and return once this broker's image shows them: a new topic once the
controller has elected its partitions' leaders (as Kafka's CreateTopics waits, up to its timeout), a deletion
once the controller has removed it. A partition's state is only ever changed conditionally on its znode version
(the partition epoch), so two writers (the controller, a leader changing its ISR) cannot both win.

When the ZooKeeper session is lost, the broker stops acting as leader at once (the controller will have moved
leadership: its ephemeral znode is gone). kazoo's connection states reach the event loop in the order kazoo saw
them, and every decision is taken there: whenever the client is connected with a session other than the one that
owns this broker's registration (a new session, whether or not the loss was seen first), the broker registers again
(idempotent: a registration its session already owns is kept; retried until made) and every topic is read and told
again.

The image never goes back: one task reads and applies (watch marks, the full re-read after a new session), and a
partition state read that is older than the image's (by leader epoch, then partition epoch) is not taken. A listener
that fails to follow a delta is told again (the current state of the topics it missed) until it follows it; the
others are told as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import AuthFailedError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from rill.config import ensure_cluster_id
from rill.errors import ErrorCode, KafkaError
from rill.metadata import zk_layout as zl
from rill.metadata.client_quotas import ClientQuotas, QuotaChanges
from rill.metadata.delta_listeners import DeltaListeners
from rill.metadata.store import (
    BrokerInfo,
    MetadataDelta,
    MetadataListener,
    TopicState,
)
from rill.metadata.user_credentials import CredentialChanges
from rill.metadata.zk_acls import ZkAcls
from rill.metadata.zk_changes import ZkChanges
from rill.metadata.zk_client import ZkClientSecurity, make_zk_client
from rill.metadata.zk_client_metrics import ZkClientMetrics
from rill.metadata.zk_follower import RETRY_BACKOFF_S, ZkFollower
from rill.metadata.zk_image import read_cluster, read_configs
from rill.metadata.zk_quotas import ZkClientQuotas
from rill.metadata.zk_users import ZkUserCredentials
from rill.metadata.zk_watches import lasting_children_watch
from rill.security.acl import AccessControlEntry, AclCache, ResourcePattern
from rill.security.scram import ScramCredential

log = logging.getLogger(__name__)

ClientFactory = Callable[[str, float], KazooClient]
RETRY_BACKOFF_MAX_S = 5.0


class ZooKeeperUnreachable(Exception):
    """The ensemble could not be reached within ``zookeeper.connection.timeout.ms`` at start."""


class ZkMetadataStore(ZkChanges, ZkFollower):
    """A :class:`~rill.metadata.store.MetadataStore` backed by ZooKeeper."""

    def __init__(
        self,
        connect: str,
        node_id: int,
        advertised: BrokerInfo,
        *,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int = 18000,
        cluster_id: str | None = None,
        wait_timeout_s: float = 30.0,
        security: ZkClientSecurity | None = None,
        client_factory: ClientFactory | None = None,
    ) -> None:
        self._connect = connect
        self._node_id = node_id
        self._broker = advertised
        self._wanted_cluster_id = cluster_id
        self._connection_timeout_s = connection_timeout_ms / 1000.0
        self._session_timeout_s = session_timeout_ms / 1000.0
        self._wait_timeout_s = wait_timeout_s
        self._security = security
        self.zk = (client_factory or self._secured_client)(connect, session_timeout_ms / 1000.0)
        self._listeners = DeltaListeners(lambda: self._topics, lambda: self._offset)
        self._topics: dict[str, TopicState] = {}
        self._by_id: dict[uuid.UUID, TopicState] = {}
        self._assignment_versions: dict[str, int] = {}  # each topic's assignment znode version the image shows
        self._brokers: dict[int, BrokerInfo] = {}
        self._controller_id = -1
        self._broker_configs: dict[str, str] = {}
        self._default_broker_configs: dict[str, str] = {}
        self._group_configs: dict[str, dict[str, str]] = {}  # group id -> its dynamic configs (GROUP resources)
        self._watched_group_configs: set[str] = set()
        self._cluster_id = ""
        self._offset = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self.users = ZkUserCredentials(self.zk, self._from_kazoo)
        self.acl_store = ZkAcls(self.zk, self._from_kazoo)
        self.quotas = ZkClientQuotas(self.zk)
        self.client_metrics = ZkClientMetrics(self.zk, self._from_kazoo)
        self._dirty_topics: set[str] = set()
        self._dirty_states: dict[str, set[int]] = {}
        self._dirty_cluster = False
        self._wake = asyncio.Event()
        self._applied = asyncio.Condition()
        self._follower: asyncio.Task[None] | None = None
        self._watched_topics: dict[str, object] = {}  # topic -> the token its watches live while it is there
        self._session_lost = False
        self._registered_session = 0  # the session that owns this broker's registration
        self._registrar: asyncio.Task[None] | None = None
        self._tell_all = False  # the next pass reads and tells every topic (after a new session)
        self._closed = False
        self.on_session_change: Callable[[bool], None] | None = None

    # -- start and stop ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, make the persistent parents, read or make the cluster id, register this broker, load the
        image and start following it. An unreachable ensemble raises ZooKeeperUnreachable; a broker id already
        registered raises KafkaError naming it."""
        self._loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._make_chroot)
            await asyncio.to_thread(self.zk.start, self._connection_timeout_s)
        except KazooTimeoutError:
            await asyncio.to_thread(self.zk.stop)
            raise ZooKeeperUnreachable(
                f"cannot reach ZooKeeper at {self._connect} within {self._connection_timeout_s:g} s "
                "(zookeeper.connection.timeout.ms)"
            ) from None
        except AuthFailedError:
            await asyncio.to_thread(self.zk.stop)
            user = self._security.sasl_username if self._security is not None else None
            raise ZooKeeperUnreachable(
                f"ZooKeeper at {self._connect} refused the broker's SASL authentication as {user!r} (the JAAS "
                "Client section that java.security.auth.login.config names, in KAFKA_OPTS)"
            ) from None
        self.zk.add_listener(self._on_state)
        await asyncio.to_thread(self._prepare)
        await self._register()
        await asyncio.to_thread(self._watch_cluster)
        await asyncio.to_thread(self.users.start)
        await asyncio.to_thread(self.acl_store.start)
        await asyncio.to_thread(self.client_metrics.start)
        await self.quotas.start()
        # What the watches' first calls marked (queued on the loop before the threads that set them returned) is
        # all read now, after they were set: following starts from what changes later, rather than reading it all
        # a second time.
        self._dirty_cluster = False
        self._dirty_topics.clear()
        self._dirty_states.clear()
        self._wake.clear()
        await self._refresh_cluster()
        self._follower = asyncio.create_task(self._follow(), name="zk-metadata")

    def _secured_client(self, hosts: str, timeout_s: float) -> KazooClient:
        return make_zk_client(hosts, timeout_s, self._security)

    def _make_chroot(self) -> None:
        """Make the chroot of ``zookeeper.connect`` (``hosts/chroot``) when missing, as Kafka does."""
        hosts, slash, chroot = self._connect.partition("/")
        if not slash or not chroot.strip("/"):
            return
        client = make_zk_client(hosts, self._session_timeout_s, self._security)
        try:
            client.start(self._connection_timeout_s)
            client.ensure_path("/" + chroot.strip("/"))
        finally:
            client.stop()
            client.close()

    def _prepare(self) -> None:
        for path in zl.PARENTS:
            self.zk.ensure_path(path)
        with contextlib.suppress(NodeExistsError):
            self.zk.create(zl.CLUSTER_ID, zl.encode_cluster_id(ensure_cluster_id(self._wanted_cluster_id)))
        data, _ = self.zk.get(zl.CLUSTER_ID)
        self._cluster_id = zl.decode_cluster_id(data)
        if self._wanted_cluster_id and self._wanted_cluster_id != self._cluster_id:
            raise KafkaError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"ZooKeeper at {self._connect} holds cluster.id {self._cluster_id}, but cluster.id="
                f"{self._wanted_cluster_id} was configured",
            )

    async def _register(self) -> None:
        """Register this broker (an ephemeral znode) and note the session that owns it. A registration this session
        already owns is kept (a create applied but answered with a lost connection, say). One of another session at
        the same address is this broker's own from before a crash: its session ends within the session timeout,
        and this waits for it. One at another address is another live broker with this id: refused."""
        path = zl.broker_path(self._node_id)
        deadline = asyncio.get_running_loop().time() + self._session_timeout_s * 1.5
        waited = False
        while True:
            try:
                _, stat = await asyncio.to_thread(self.zk.create, path, zl.encode_broker(self._broker),
                                                  ephemeral=True, include_data=True)  # fmt: skip
                self._registered_session = stat.ephemeralOwner
                return
            except NodeExistsError:
                try:
                    data, stat = await asyncio.to_thread(self.zk.get, path)
                except NoNodeError:
                    continue
                client_id = self.zk.client_id
                if client_id is not None and stat.ephemeralOwner == client_id[0]:
                    self._registered_session = stat.ephemeralOwner
                    return
                other = zl.decode_broker(self._node_id, data)
                if (other.host, other.port) != (self._broker.host, self._broker.port) or (
                    asyncio.get_running_loop().time() > deadline
                ):
                    raise KafkaError(
                        ErrorCode.INVALID_REQUEST,
                        f"broker.id {self._node_id} is already registered in ZooKeeper at {self._connect} by a "
                        f"live broker ({other.host}:{other.port})",
                    ) from None
                if not waited:
                    log.info("Waiting for the registration of this broker's previous session to expire")
                    waited = True
                await asyncio.sleep(0.2)

    async def close(self) -> None:
        self._closed = True
        await self.quotas.close()
        tasks = [self._follower, self._registrar]
        self._follower = self._registrar = None
        for task in tasks:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await self._listeners.close()
        await asyncio.to_thread(self._stop_client)

    def _stop_client(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            log.debug("closing the ZooKeeper client failed", exc_info=True)

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Mark this broker as shutting down, so that the controller moves the leadership of its partitions to
        other ISR members, and wait (up to ``timeout_s``, the mark's write included: with ZooKeeper unreachable
        the write waits for a connection) until it leads none that another live ISR member could; True when it
        got there."""
        path = zl.broker_path(self._node_id)
        live = set(self._brokers) - {self._node_id}

        def moved() -> bool:
            return not any(
                p.leader == self._node_id and any(r in live for r in p.isr if r != self._node_id)
                for t in self._topics.values()
                for p in t.partitions
            )

        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.to_thread(self.zk.set, path, zl.encode_broker(self._broker, shutting_down=True))
                async with self._applied:
                    await self._applied.wait_for(moved)
            return True
        except TimeoutError:
            return False
        except Exception as e:  # ZooKeeper refused the write or the connection was lost: stop anyway
            log.warning("controlled shutdown could not mark broker %d as shutting down: %r", self._node_id, e)
            return False

    def close_now(self) -> None:
        self._closed = True
        self.quotas.close_now()
        for task in (self._follower, self._registrar):
            if task is not None:
                task.cancel()
        self._follower = self._registrar = None
        self._listeners.close_now()
        self._stop_client()

    # -- following ZooKeeper ------------------------------------------------------------------------------

    def _from_kazoo(self, mark: Callable[[], None]) -> None:
        """Run ``mark`` on the loop (watch callbacks arrive on kazoo's threads)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(mark)

    def _mark_cluster(self, *_: Any) -> bool:
        def mark() -> None:
            self._dirty_cluster = True
            self._wake.set()

        self._from_kazoo(mark)
        return True

    def _watch_cluster(self) -> None:
        """Watches (kazoo's recipes set them again after each event; the children watches also once their znode is
        made again after a deletion): brokers, the controller, the topic list, the dynamic broker configs."""
        lasting_children_watch(self.zk, zl.BROKER_IDS, self._mark_cluster)
        self.zk.DataWatch(zl.CONTROLLER, self._mark_cluster)
        self.zk.DataWatch(zl.broker_config_path(self._node_id), self._mark_cluster)
        self.zk.DataWatch(zl.broker_config_path(None), self._mark_cluster)
        lasting_children_watch(self.zk, zl.TOPICS, self._on_topic_list)
        self.zk.ensure_path(zl.GROUP_CONFIGS)
        lasting_children_watch(self.zk, zl.GROUP_CONFIGS, self._on_group_config_list)

    def _on_group_config_list(self, names: list[str]) -> bool:
        for name in names:
            if name not in self._watched_group_configs:
                self._watched_group_configs.add(name)
                self.zk.DataWatch(zl.group_config_path(name), self._mark_cluster)
        self._mark_cluster()
        return True

    def _on_topic_list(self, names: list[str]) -> bool:
        for name in names:
            self._mark_topic(name)
        self._mark_cluster()
        return True

    async def _refresh_cluster(self) -> None:
        brokers, controller, own, default, topics = await asyncio.to_thread(read_cluster, self.zk, self._node_id)
        self._group_configs = await asyncio.to_thread(self._read_group_configs)
        configs_changed = own != self._broker_configs or default != self._default_broker_configs
        self._brokers, self._controller_id = brokers, controller
        self._broker_configs, self._default_broker_configs = own, default
        new = [t for t in topics if t not in self._watched_topics]
        self._watched_topics.update((t, object()) for t in new)
        for t in new:
            await asyncio.to_thread(self._watch_topic, t)
        gone = [t for t in self._watched_topics if t not in topics]
        for t in gone:
            del self._watched_topics[t]
        if new or gone:
            await self._refresh_topics(sorted(set(new) | set(gone)))
        if configs_changed:
            await self._apply([], [], broker_configs=True)
        async with self._applied:
            self._applied.notify_all()

    def _read_group_configs(self) -> dict[str, dict[str, str]]:
        try:
            names = self.zk.get_children(zl.GROUP_CONFIGS)
        except NoNodeError:
            return {}
        configs = {name: read_configs(self.zk, zl.group_config_path(name)) for name in names}
        return {name: c for name, c in configs.items() if c}

    async def _apply(
        self, changed: list[TopicState], deleted: list[TopicState], *, broker_configs: bool = False
    ) -> None:
        for t in deleted:
            if self._topics.get(t.name) is t:
                del self._topics[t.name]
            self._by_id.pop(t.topic_id, None)
        for t in changed:
            self._topics[t.name] = t
            self._by_id[t.topic_id] = t
        self._offset += 1
        delta = MetadataDelta(self._offset, tuple(changed), tuple(deleted), broker_configs)
        await self._listeners.tell(delta)
        async with self._applied:
            self._applied.notify_all()

    async def _wait_until(self, done: Callable[[], bool], what: str) -> None:
        """Wait until this broker's image shows a change written to ZooKeeper."""
        try:
            async with asyncio.timeout(self._wait_timeout_s):
                async with self._applied:
                    await self._applied.wait_for(done)
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"{what} was written, but not yet in effect") from None

    def _on_state(self, state: str) -> None:
        """kazoo's connection states (on kazoo's thread): handed to the loop in the order they came, where
        ``_session_event`` decides; nothing is tested here, where the loop may not have caught up yet."""
        self._from_kazoo(lambda: self._session_event(state))

    def _session_event(self, state: str) -> None:
        """LOST: this broker stops acting as leader at once. CONNECTED: every topic is read again (the connection's
        loss took the watches), and when the session is not the one that owns this broker's registration, it
        registers again (``_keep_registered``)."""
        if state == KazooState.LOST:
            self._lose_session()
        elif state == KazooState.CONNECTED and not self._closed:
            # kazoo drops every watch when the connection is lost, and sets none again when it connects, even in
            # the same session: the partition state znodes' watches, which their reads set, are set again by
            # reading every topic whole (which also brings what changed meanwhile).
            self._dirty_topics.update(self._watched_topics)
            self._wake.set()
            if self._registrar is None or self._registrar.done():
                self._registrar = asyncio.create_task(self._keep_registered(), name="zk-registration")

    def _lose_session(self) -> None:
        if self._session_lost:
            return
        log.error("ZooKeeper session lost: this broker stops acting as leader until it registers again")
        self._session_lost = True
        if self.on_session_change is not None:
            self.on_session_change(False)

    async def _keep_registered(self) -> None:
        """Until the current session owns this broker's registration: register (a session that is not the
        registered one is a new one: the old one, and its registration, are gone), then read and tell every topic
        again. A failed registration is tried again, backing off; a session that changes meanwhile is registered
        in turn. Ends when the client is not connected (the next CONNECTED starts it again)."""
        delay = RETRY_BACKOFF_S
        while not self._closed:
            client_id = self.zk.client_id
            if client_id is None or client_id[0] == self._registered_session:
                return
            self._lose_session()
            try:
                await self._register()
            except Exception as e:
                log.error("could not register again in ZooKeeper (%s); trying again in %.1f s", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_BACKOFF_MAX_S)
                continue
            log.info("Registered again in ZooKeeper with a new session (0x%x)", self._registered_session)
            self._session_lost = False
            if self.on_session_change is not None:
                self.on_session_change(True)
            # The broker stopped leading when the session ended: every topic is read and told again, in order
            # with the watches' changes.
            self._tell_all = True
            self._dirty_cluster = True
            self._wake.set()

    @property
    def session_alive(self) -> bool:
        return not self._session_lost

    # -- MetadataStore: reads ------------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def controller_id(self) -> int:
        return self._controller_id

    @property
    def offset(self) -> int:
        return self._offset

    def brokers(self) -> list[BrokerInfo]:
        return [self._brokers[b] for b in sorted(self._brokers)]

    def topics(self) -> Mapping[str, TopicState]:
        return self._topics

    def topic(self, name: str) -> TopicState | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None:
        return self._by_id.get(topic_id)

    def broker_configs(self) -> Mapping[str, str]:
        return self._broker_configs

    def default_broker_configs(self) -> Mapping[str, str]:
        return self._default_broker_configs

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        return self._group_configs.get(group_id, {})

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.credentials.get(user, mechanism)

    def scram_credentials(self, user: str) -> Mapping[str, ScramCredential]:
        return self.users.of(user)

    def scram_users(self) -> list[str]:
        return self.users.credentials.users()

    async def alter_scram_credentials(self, changes: CredentialChanges) -> None:
        await self.users.alter(changes, self._wait_timeout_s)

    def acls(self) -> AclCache:
        return self.acl_store.cache

    async def alter_acls(self, changes: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        await self.acl_store.alter(changes, self._wait_timeout_s)
    def client_quotas(self) -> ClientQuotas:
        return self.quotas.quotas

    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        await self.quotas.alter(changes, self._wait_timeout_s)

    def add_listener(self, listener: MetadataListener) -> None:
        self._listeners.add(listener)
