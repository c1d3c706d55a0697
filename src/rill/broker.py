"""A broker assembled from its configuration: log manager, metadata store, replica manager, coordinators,
request dispatcher, and the network listener.

Start order: logs are loaded (and recovered) first, then the listener binds (so the advertised port is known
when it was 0), then the metadata store and the replica manager come up, and only then are requests served.
A start that fails releases what it took (listener, metrics port, open logs, the log dirs' locks).
Stop order is the reverse: no new connections; requests that wait for something (a JoinGroup waiting for
the rebalance, a long-polling Fetch) end at once; the other in-flight requests finish; background work
stops; logs are flushed, checkpointed and marked cleanly shut down. ``abort`` stops as a crash would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from rill.api.context import BrokerServices
from rill.api.dispatcher import RequestDispatcher
from rill.api.init_producer_id import ProducerIdManager
from rill.config import BrokerConfig, topic_config_defaults
from rill.config.broker_config import effective_broker_value, per_ip_overrides
from rill.config.definitions import NOT_YET_USED
from rill.config.kafka_definitions import KAFKA_ONLY
from rill.fsutil import raise_open_files_limit
from rill.log.log_cleaner_manager import CleanerConfig
from rill.log.log_config import LogConfig
from rill.log.log_manager import LogManager
from rill.metadata.embedded import EmbeddedMetadataStore
from rill.metadata.store import BrokerInfo, MetadataDelta, MetadataStore, dynamic_broker_configs
from rill.network.connection_quotas import ConnectionQuotas
from rill.network.handler import CloseConnection
from rill.network.server import SocketServer
from rill.quota import QuotaManagers
from rill.replica.purgatory import PurgatoryClosed
from rill.replica.replica_manager import ReplicaManager
from rill.security.authorizer import AclAuthorizer, parse_super_users
from rill.security.listener_configs import BrokerSecurity, advertised_endpoints
from rill.telemetry.client_metrics_manager import ClientMetricsManager
from rill.telemetry.pushed_metrics import PushedMetrics

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = int(config.get("node.id"))
        self._server: SocketServer | None = None
        self._background: asyncio.Task[None] | None = None
        self._metrics_stop: Any = None
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.metadata: MetadataStore | None = None
        self.controller: Any = None  # the KafkaController candidacy of a broker in a ZooKeeper cluster
        self._isr_checks: asyncio.Task[None] | None = None
        self.services: BrokerServices | None = None
        self._bound: tuple[str, int] | None = None
        self._connection_limits: tuple[Any, ...] | None = None
        self._log_loading: asyncio.Future[None] | None = None
        self.step = "not started"  # what start is doing (named when a start times out)

    @property
    def bound_address(self) -> tuple[str, int]:
        if self._bound is None:
            raise RuntimeError("broker is not started")
        return self._bound

    @property
    def bound_addresses(self) -> dict[str, tuple[str, int]]:
        """Listener name -> (host, port) bound."""
        return self._server.bound_addresses if self._server is not None else {}

    def _effective_topic_configs(self, overrides: Any) -> dict[str, str]:
        assert self.metadata is not None
        merged = topic_config_defaults(self.config, dynamic_broker_configs(self.metadata))
        merged.update(overrides)
        return merged

    def socket_fds(self) -> list[int]:
        """The descriptors of the listening sockets (the metrics endpoint's included) and of the client
        connections (none when stopped)."""
        fds = self._server.socket_fds() if self._server is not None else []
        metrics_fd = getattr(self._metrics_stop, "fd", -1)
        return [*fds, metrics_fd] if metrics_fd >= 0 else fds

    async def start(self) -> None:
        """Start serving; on failure (or cancellation) everything taken so far is released."""
        try:
            await self._start()
        except BaseException:
            await self._release_after_failed_start()
            raise
        self.step = "started"

    async def _start(self) -> None:
        config = self.config
        unused = sorted(name for name in config.originals if name in NOT_YET_USED or name in KAFKA_ONLY)
        if unused:
            log.warning(
                "Set but not used by this version of Rill (its feature is not built, or is Kafka's own; "
                "docs/OPERATIONS.md): %s",
                ", ".join(unused),
            )
        before, after = raise_open_files_limit()
        if after != before:
            log.info("Raised the open files limit from %d to %d", before, after)
        from rill.metrics import implementations

        log.info("Implementations: %s", ", ".join(f"{m} {i}" for m, i in implementations().items()))
        log_dirs = [Path(d) for d in config.log_dirs]
        defaults = LogConfig.from_topic_configs(topic_config_defaults(config, {}), LogConfig())
        self.step = "loading the logs"
        log_manager = self.log_manager = LogManager(log_dirs, defaults, broker_config=config)
        # Shielded: a cancelled start waits for the loading thread before closing what it opened.
        self._log_loading = asyncio.ensure_future(asyncio.to_thread(log_manager.startup))
        await asyncio.shield(self._log_loading)

        host, port = config.listener_address
        metrics = None
        metrics_port = int(config.get("metrics.port") or 0)
        if metrics_port:
            from rill.metrics import BrokerMetrics, start_http_server

            self.step = "starting the metrics endpoint"
            metrics = BrokerMetrics()
            self._metrics_stop = start_http_server(host, metrics_port, metrics)

        self.step = "binding the listener"
        security = BrokerSecurity(config)
        dispatcher_holder: list[RequestDispatcher] = []
        self._server = SocketServer(
            _LateHandler(dispatcher_holder),
            host,
            port,
            listeners=config.listeners,
            ssl_contexts=security.ssl_contexts(),
            principal_names=security.principal_names(),
            sasl_max_receive_bytes=int(config.get("sasl.server.max.receive.size")),
            listener_sasl_max_receive_bytes={name: sec.max_receive for name, sec in security.listeners.items()},
            max_request_bytes=int(config.get("socket.request.max.bytes")),
            idle_timeout_ms=int(config.get("connections.max.idle.ms")),
            send_buffer_bytes=int(config.get("socket.send.buffer.bytes")),
            receive_buffer_bytes=int(config.get("socket.receive.buffer.bytes")),
            quotas=ConnectionQuotas(
                *self._connection_quota_values({}),
                samples=int(config.get("quota.window.num")),
                window_s=int(config.get("quota.window.size.seconds")),
            ),
            max_queued_requests=int(config.get("queued.max.requests")),
            max_queued_bytes=int(config.get("queued.max.request.bytes")),
        )
        self._server.on_tls_handshake_failed = lambda listener: security.count(listener, False)
        bound_host, bound_port = await self._server.start()
        self._bound = (bound_host, bound_port)
        self.step = "loading the metadata"
        endpoints = advertised_endpoints(config, self._server.bound_addresses)
        inter_broker = config.inter_broker_listener.listener_name
        _, adv_host, adv_port, _ = next((e for e in endpoints if e[0] == inter_broker), endpoints[0])
        advertised = BrokerInfo(self.node_id, adv_host, adv_port, config.get("broker.rack"), endpoints)
        self.metadata = await self._open_metadata(log_dirs[0], advertised)
        security.scram_lookup = self.metadata.scram_credential
        self.replica_manager = ReplicaManager(
            self.node_id, self.log_manager, self.metadata, self._effective_topic_configs
        )
        self.replica_manager.sync_with_metadata()
        if self.controller is not None:
            self._join_cluster()
        self._apply_connection_quotas()  # dynamic values kept from an earlier run
        self._apply_cleaner_configs()
        self._apply_producer_expiration()
        self.metadata.add_listener(self._on_metadata_delta)
        self.services = BrokerServices(
            node_id=self.node_id,
            config=config,
            metadata=self.metadata,
            replica_manager=self.replica_manager,
            producer_ids=ProducerIdManager(self.metadata),
            metrics=metrics,
            security=security,
            authorizer=_authorizer(config, self.metadata),
            quotas=QuotaManagers(
                self.metadata.client_quotas,
                samples=int(config.get("quota.window.num")),
                window_s=int(config.get("quota.window.size.seconds")),
            ),
        )
        self.services.client_metrics = ClientMetricsManager(
            self.metadata.client_metrics_configs, int(config.get("telemetry.max.bytes")),
            PushedMetrics(int(config.get("telemetry.max.series.per.client"))),
        )
        self.services.group_coordinator = self._maybe_start_group_coordinator()
        self.services.txn_coordinator = self._start_txn_coordinator()
        self.services.share_coordinator = self._start_share_coordinator()
        if metrics is not None:
            metrics.attach(self)
        if self.controller is not None:
            self.step = "starting the controller"
            await self.controller.start()
        dispatcher_holder.append(RequestDispatcher(self.services))
        self._background = asyncio.create_task(self.log_manager.run_background(), name="log-manager")
        log.info(
            "Broker %d serving on %s (advertised %s)",
            self.node_id,
            ", ".join(f"{n}://{h}:{p}" for n, (h, p) in self._server.bound_addresses.items()),
            ", ".join(f"{n}://{h}:{p} ({proto})" for n, h, p, proto in endpoints),
        )

    def _join_cluster(self) -> None:
        """In a cluster: followers fetch from their leaders, leaders keep their ISR, and a lost ZooKeeper
        session ends this broker's leadership at once."""
        from rill.replica.read_replica import replica_selector
        from rill.replica.replica_fetcher import ReplicaFetcherManager

        rm, store = self.replica_manager, self.metadata
        assert rm is not None and store is not None
        rm.replica_selector = replica_selector(self.config.get("replica.selector.class"))
        rm.fetchers = ReplicaFetcherManager(self.node_id, self.config, rm.fetch_purgatory.check_and_complete)
        rm.update_fetchers()
        store.on_session_change = rm.on_session_change  # type: ignore[attr-defined]
        lag_ms = int(self.config.get("replica.lag.time.max.ms"))
        self._isr_checks = asyncio.create_task(self._check_isr(lag_ms), name="isr-checks")

    async def _check_isr(self, lag_ms: int) -> None:
        while True:
            await asyncio.sleep(lag_ms / 2000.0)
            if self.replica_manager is not None:
                try:
                    await self.replica_manager.maybe_shrink_isr(lag_ms)
                except Exception:
                    log.exception("checking the ISRs failed")

    async def _open_metadata(self, data_dir: Path, advertised: BrokerInfo) -> MetadataStore:
        """The embedded store of a single broker, or, with ``zookeeper.connect``, this broker's view of a cluster
        in ZooKeeper (and its candidacy for controller)."""
        config = self.config
        cluster_id = config.get("cluster.id") or None
        connect = config.get("zookeeper.connect")
        if not connect:
            return EmbeddedMetadataStore(data_dir, self.node_id, advertised, cluster_id)
        from rill.controller.controller import KafkaController
        from rill.metadata.zk_client import ZkClientSecurity
        from rill.metadata.zookeeper import ZkMetadataStore

        session_ms = int(config.get("zookeeper.session.timeout.ms"))
        store = ZkMetadataStore(
            connect,
            self.node_id,
            advertised,
            session_timeout_ms=session_ms,
            connection_timeout_ms=int(config.get("zookeeper.connection.timeout.ms") or session_ms),
            cluster_id=cluster_id,
            security=ZkClientSecurity.from_config(config.get),
        )
        await store.start()
        self.controller = KafkaController(
            store.zk,
            self.node_id,
            unclean_leader_election=bool(config.get("unclean.leader.election.enable")),
            auto_rebalance=bool(config.get("auto.leader.rebalance.enable")),
            imbalance_percentage=int(config.get("leader.imbalance.per.broker.percentage")),
            imbalance_check_interval_s=float(config.get("leader.imbalance.check.interval.seconds")),
        )
        return store

    def _connection_quota_values(self, dynamic: Any) -> tuple[int, int, dict[str, int], int]:
        """``max.connections``, ``max.connections.per.ip`` and its overrides (resolved to addresses),
        ``max.connection.creation.rate``."""
        values = [effective_broker_value(self.config, name, dynamic) for name in _CONNECTION_LIMITS]
        overrides = per_ip_overrides(values[2] or "")
        return int(values[0]), int(values[1]), overrides, int(values[3])

    async def _on_metadata_delta(self, delta: MetadataDelta) -> None:
        if delta.broker_configs:
            self._apply_connection_quotas()
            self._apply_cleaner_configs()
            self._apply_producer_expiration()

    def _apply_producer_expiration(self) -> None:
        """Follow the dynamic ``producer.id.expiration.ms`` (at start, and on every change of the dynamic broker
        configs)."""
        if self.metadata is None or self.log_manager is None:
            return
        dynamic = dynamic_broker_configs(self.metadata)
        value = int(effective_broker_value(self.config, "producer.id.expiration.ms", dynamic))
        self.log_manager.producer_id_expiration_ms = value

    def _apply_cleaner_configs(self) -> None:
        """Follow the dynamic ``log.cleaner.*`` configs and ``replica.alter.log.dirs.io.max.bytes.per.second`` (at
        start, and on every change of the dynamic broker configs)."""
        if self.metadata is None or self.log_manager is None:
            return
        dynamic = dynamic_broker_configs(self.metadata)
        config = CleanerConfig.from_broker(lambda name: effective_broker_value(self.config, name, dynamic))
        self.log_manager.cleaner.reconfigure(config)
        if self.replica_manager is not None:  # the copy rate of the moves between log dirs
            rate = effective_broker_value(self.config, "replica.alter.log.dirs.io.max.bytes.per.second", dynamic)
            self.replica_manager.log_dir_mover.io_max_bytes_per_second = float(rate)

    def _apply_connection_quotas(self) -> None:
        """Follow the dynamic connection limits (at start, and on every change of the dynamic broker configs;
        acts on a change of theirs)."""
        if self.metadata is None or self._server is None:
            return
        dynamic = dynamic_broker_configs(self.metadata)
        raw = tuple(dynamic.get(name) for name in _CONNECTION_LIMITS)
        if raw == self._connection_limits:
            return
        self._connection_limits = raw
        try:
            self._server.update_quotas(*self._connection_quota_values(dynamic))
        except ValueError as e:
            log.warning("connection limits unchanged: %s", e)

    def _maybe_start_group_coordinator(self) -> Any:
        try:
            from rill.coordinator.group.group_coordinator import GroupCoordinator
        except ImportError:
            return None
        assert self.services is not None
        return GroupCoordinator.create(self.services)

    def _start_txn_coordinator(self) -> Any:
        from rill.coordinator.transaction.transaction_coordinator import TransactionCoordinator

        assert self.services is not None
        return TransactionCoordinator.create(self.services)

    def _start_share_coordinator(self) -> Any:
        from rill.coordinator.share.share_coordinator import ShareCoordinator

        assert self.metadata is not None and self.replica_manager is not None
        coordinator = ShareCoordinator(self.config, self.metadata, self.replica_manager,
                                       single_broker=self.controller is None)  # fmt: skip
        self.metadata.add_listener(coordinator.on_metadata_delta)
        coordinator.follow_leadership()
        return coordinator

    async def _stop_share_parts(self) -> None:
        if self.services is None:
            return
        if self.services.share_coordinator is not None:
            self.services.share_coordinator.shutdown()
        if self.services.share is not None:
            await self.services.share.close()

    async def stop(self) -> None:
        await self._maybe_controlled_shutdown()
        server, self._server = self._server, None
        if server is not None:
            await server.stop_accepting()
        # Requests parked until something happens are answered (JoinGroup and SyncGroup with
        # NOT_COORDINATOR) or ended (a Fetch waiting for data) now, not after their wait.
        coordinator = self.services.group_coordinator if self.services else None
        if coordinator is not None:
            await coordinator.shutdown()
        txn_coordinator = self.services.txn_coordinator if self.services else None
        if txn_coordinator is not None:
            await txn_coordinator.shutdown()
        await self._stop_share_parts()
        if self.replica_manager is not None:
            self.replica_manager.fetch_purgatory.close()
        if server is not None:
            await server.stop()
        if self.replica_manager is not None:
            self.replica_manager.shutdown()
            await self._leave_cluster()
        await self._stop_background()
        log_manager, self.log_manager = self.log_manager, None
        if log_manager is not None:
            await asyncio.to_thread(log_manager.shutdown)
        if self.controller is not None:
            await self.controller.stop()
        if self.metadata is not None:
            await self.metadata.close()
        self._stop_metrics()
        log.info("Broker %d stopped", self.node_id)

    async def _leave_cluster(self) -> None:
        checks, self._isr_checks = self._isr_checks, None
        if checks is not None:
            checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checks
        fetchers = self.replica_manager.fetchers if self.replica_manager is not None else None
        if fetchers is not None:
            await fetchers.shutdown()

    async def _maybe_controlled_shutdown(self) -> None:
        """In a cluster, move leadership off this broker before it stops (``controlled.shutdown.*``), so that
        producers see no error: they move to the new leaders while this one still answers."""
        store = self.metadata
        if self.controller is None or store is None or not self.config.get("controlled.shutdown.enable"):
            return
        tries = max(1, int(self.config.get("controlled.shutdown.max.retries")))
        backoff_s = int(self.config.get("controlled.shutdown.retry.backoff.ms")) / 1000.0
        start = time.monotonic()
        if await store.controlled_shutdown(tries * backoff_s):  # type: ignore[attr-defined]
            log.info("Controlled shutdown: leadership moved off broker %d in %.2f s", self.node_id,
                     time.monotonic() - start)  # fmt: skip
        else:
            log.warning("Controlled shutdown: broker %d still leads partitions after %.0f s; stopping anyway",
                        self.node_id, tries * backoff_s)  # fmt: skip

    async def abort(self) -> None:
        """Stop as a crash would: connections dropped unanswered, every file closed without a flush,
        no clean-shutdown marker (the next start recovers the logs), the log dirs' locks released."""
        server, self._server = self._server, None
        if server is not None:
            await server.abort()
        txn_coordinator = self.services.txn_coordinator if self.services else None
        if txn_coordinator is not None:
            await txn_coordinator.shutdown()
        await self._stop_share_parts()
        if self.replica_manager is not None:
            self.replica_manager.log_dir_mover.shutdown()
        await self._stop_background()
        await self._leave_cluster()
        if self.metadata is not None:
            self.metadata.close_now()
        self._stop_metrics()
        self.release_files()
        log.info("Broker %d aborted", self.node_id)

    def release_files(self) -> None:
        """Close every log without a flush or a clean-shutdown marker and release the log dirs' locks,
        as the kernel does for a process that dies (the next start recovers the logs). Any thread may
        call it once the broker's loop no longer runs."""
        log_manager, self.log_manager = self.log_manager, None
        if log_manager is not None:
            _close_unclean(log_manager)
        metadata = self.metadata
        if metadata is not None:
            metadata.close_now()

    async def _release_after_failed_start(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(Exception):
                await server.abort()
        await self._stop_background()
        self._stop_metrics()
        if self.metadata is not None:
            self.metadata.close_now()
        log_manager, self.log_manager = self.log_manager, None
        if log_manager is None:
            return
        loading = self._log_loading
        loaded = False
        if loading is not None:
            try:
                await loading  # after a cancelled start the loading thread may still run
                loaded = True
            except BaseException:
                log.debug("loading the logs failed", exc_info=True)
        if loaded:  # nothing was written since: a clean shutdown spares the next start a recovery
            try:
                await asyncio.to_thread(log_manager.shutdown)
                return
            except Exception:
                log.debug("shutdown after a failed start failed", exc_info=True)
        _close_unclean(log_manager)

    async def _stop_background(self) -> None:
        background, self._background = self._background, None
        if background is not None:
            background.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await background

    def _stop_metrics(self) -> None:
        stop, self._metrics_stop = self._metrics_stop, None
        if stop is not None:
            stop()


def _close_unclean(log_manager: LogManager) -> None:
    """Close every log without flushing or marking it clean, and release the log dirs' locks."""
    futures = [f for f, _ in log_manager.future_logs().values()]
    for plog in [*log_manager.all_logs(), *futures, *log_manager.retired_logs()]:
        try:
            plog.close(clean=False)
        except Exception:
            log.debug("closing a log failed", exc_info=True)
    log_manager.release_dir_locks()


_CONNECTION_LIMITS = (
    "max.connections",
    "max.connections.per.ip",
    "max.connections.per.ip.overrides",
    "max.connection.creation.rate",
)


class _LateHandler:
    """Forwards to the dispatcher once it exists (the listener binds before the broker is fully up)."""

    def __init__(self, holder: list[RequestDispatcher]) -> None:
        self._holder = holder

    async def handle(self, conn: Any, frame: memoryview) -> Any:
        if not self._holder:  # a client early for a broker still starting: closed without an answer, no traceback
            raise _ShuttingDown("the broker is starting")
        try:
            return await self._holder[0].handle(conn, frame)
        except PurgatoryClosed as e:  # a long-polling Fetch when the broker stops: close without waiting
            raise _ShuttingDown(str(e)) from None

    def may_overlap(self, conn: Any, frame: memoryview) -> bool:
        return bool(self._holder) and self._holder[0].may_overlap(conn, frame)

    def connection_closed(self, conn: Any) -> None:
        if self._holder:
            self._holder[0].connection_closed(conn)


class _ShuttingDown(CloseConnection):
    """The broker is starting or stopping: the connection closes without an answer to its request."""


def _authorizer(config: BrokerConfig, metadata: MetadataStore) -> AclAuthorizer | None:
    """The ACL authorizer ``authorizer.class.name`` names, or None (no authorization) when it is empty."""
    if not config.get("authorizer.class.name"):
        return None
    return AclAuthorizer(
        metadata.acls, parse_super_users(config.get("super.users")), bool(config.get("allow.everyone.if.no.acl.found"))
    )
