"""The rest of Kafka's broker configs: every name Kafka 4.x defines that Rill has no use for, defined into
``BROKER_CONFIGS`` with Kafka's type, default, valid values and update mode, so that a ``server.properties`` or an
admin client that sets one is understood: the name is known, the value is checked as Kafka checks it, stored, and
described (its documentation says why Rill does not use it); a broker warns at start about each one that is set.

A name Rill itself defines elsewhere (``definitions``, ``cluster_definitions``, ...) keeps that definition. The
update modes are Kafka's: ``read-only`` configs are refused by AlterConfigs as Kafka refuses them ("Cannot update
these configs dynamically"); ``per-broker`` ones only on a broker's own resource, not as the cluster-wide default;
``cluster-wide`` ones on either. The names, types and defaults are those of Kafka's generated broker config
reference (Kafka 4.1).
"""

from __future__ import annotations

from collections.abc import Iterable

# Rill's own definitions first: a name they define keeps their definition.
from rill.config import cluster_definitions as _cluster  # noqa: F401
from rill.config import coordinator_definitions as _coordinator  # noqa: F401
from rill.config import security_definitions as _security  # noqa: F401
from rill.config import share_definitions as _share  # noqa: F401
from rill.config.config_def import (
    INT,
    INT_MAX,
    LONG,
    LONG_MAX,
    LST,
    SHORT,
    B,
    ConfigType,
    D,
    Importance,
    P,
    S,
    Validator,
    all_of,
    at_least,
    between,
    one_of,
)
from rill.config.definitions import BROKER_CONFIGS

C = ConfigType.CLASS
R, PB, CW = "read-only", "per-broker", "cluster-wide"


def _non_empty(value: str) -> str | None:
    return None if value else "must not be empty"


_0, _1 = at_least(0), at_least(1)

# (why Rill does not use them, [(name, type, Kafka's default, valid values, update mode)])
_Entry = tuple[str, ConfigType, object, Validator | None, str]
_GROUPS: list[tuple[str, list[_Entry]]] = [
    ("KRaft mode's (Rill's cluster metadata lives in ZooKeeper)", [
        ("process.roles", LST, "", all_of("broker", "controller"), R),
        ("controller.listener.names", S, None, None, R),
        ("controller.quorum.bootstrap.servers", LST, "", None, R),
        ("controller.quorum.voters", LST, "", None, R),
        ("controller.quorum.election.backoff.max.ms", INT, 1000, _0, R),
        ("controller.quorum.election.timeout.ms", INT, 1000, _0, R),
        ("controller.quorum.fetch.timeout.ms", INT, 2000, _0, R),
        ("controller.quorum.append.linger.ms", INT, 25, _0, R),
        ("controller.quorum.request.timeout.ms", INT, 2000, _0, R),
        ("controller.quorum.retry.backoff.ms", INT, 20, _0, R),
        ("controller.socket.timeout.ms", INT, 30000, None, R),
        ("early.start.listeners", S, None, None, R),
        ("sasl.mechanism.controller.protocol", S, "GSSAPI", None, R),
        ("metadata.log.dir", S, None, None, R),
        ("metadata.log.max.record.bytes.between.snapshots", LONG, 20971520, _1, R),
        ("metadata.log.max.snapshot.interval.ms", LONG, 3600000, _0, R),
        ("metadata.log.segment.bytes", INT, 1073741824, at_least(8388608), R),
        ("metadata.log.segment.ms", LONG, 604800000, None, R),
        ("metadata.max.retention.bytes", LONG, 104857600, None, R),
        ("metadata.max.retention.ms", LONG, 604800000, None, R),
        ("metadata.max.idle.interval.ms", INT, 500, _0, R),
        ("broker.heartbeat.interval.ms", INT, 2000, None, R),
        ("broker.session.timeout.ms", INT, 9000, None, R),
        ("initial.broker.registration.timeout.ms", INT, 60000, None, R),
        ("log.dir.failure.timeout.ms", LONG, 30000, _1, R),
    ]),
    ("of the streams group protocol (KIP-1071), which Rill does not serve, and of the consumer and share group "
     "protocols' parts Rill does not build (share group settings beyond what Rill serves)", [
        ("group.coordinator.threads", INT, 4, _1, R),
        ("group.coordinator.append.linger.ms", INT, 5, _0, R),
        ("group.coordinator.rebalance.protocols", LST, "classic,consumer,streams",
         all_of("consumer", "classic", "share", "streams"), R),
        ("group.share.assignors", LST, "simple", None, R),
        ("group.share.delivery.count.limit", INT, 5, between(2, 10), R),
        ("group.share.heartbeat.interval.ms", INT, 5000, _1, R),
        ("group.share.max.heartbeat.interval.ms", INT, 15000, _1, R),
        ("group.share.max.record.lock.duration.ms", INT, 60000, between(30000, 3600000), R),
        ("group.share.max.session.timeout.ms", INT, 60000, _1, R),
        ("group.share.max.share.sessions", INT, 2000, _1, R),
        ("group.share.max.size", INT, 200, between(1, 1000), R),
        ("group.share.min.heartbeat.interval.ms", INT, 5000, _1, R),
        ("group.share.min.record.lock.duration.ms", INT, 15000, between(1000, 30000), R),
        ("group.share.min.session.timeout.ms", INT, 45000, _1, R),
        ("group.share.partition.max.record.locks", INT, 2000, between(100, 10000), R),
        ("group.share.record.lock.duration.ms", INT, 30000, between(1000, 3600000), R),
        ("group.share.session.timeout.ms", INT, 45000, _1, R),
        ("group.streams.heartbeat.interval.ms", INT, 5000, _1, R),
        ("group.streams.max.heartbeat.interval.ms", INT, 15000, _1, R),
        ("group.streams.max.session.timeout.ms", INT, 60000, _1, R),
        ("group.streams.max.size", INT, INT_MAX, _1, R),
        ("group.streams.max.standby.replicas", INT, 2, _0, R),
        ("group.streams.min.heartbeat.interval.ms", INT, 5000, _1, R),
        ("group.streams.min.session.timeout.ms", INT, 45000, _1, R),
        ("group.streams.num.standby.replicas", INT, 0, _0, R),
        ("group.streams.session.timeout.ms", INT, 45000, _1, R),
        ("share.coordinator.load.buffer.size", INT, 5242880, _1, R),
        ("share.coordinator.state.topic.compression.codec", INT, 0, None, R),
        ("share.coordinator.state.topic.min.isr", SHORT, 2, _1, R),
        ("share.coordinator.state.topic.num.partitions", INT, 50, _1, R),
        ("share.coordinator.state.topic.replication.factor", SHORT, 3, _1, R),
        ("share.coordinator.state.topic.segment.bytes", INT, 104857600, _1, R),
        ("share.coordinator.write.timeout.ms", INT, 5000, _1, R),
        ("share.coordinator.append.linger.ms", INT, 5, _0, R),
        ("share.coordinator.snapshot.update.records.per.snapshot", INT, 500, _0, R),
        ("share.coordinator.threads", INT, 1, _1, R),
        ("share.fetch.purgatory.purge.interval.requests", INT, 1000, None, R),
    ]),
    ("of tiered storage, which Rill has not built", [
        ("remote.log.storage.system.enable", B, "false", None, R),
        ("remote.fetch.max.wait.ms", INT, 500, _1, CW),
        ("remote.list.offsets.request.timeout.ms", LONG, 30000, _1, CW),
        ("remote.log.manager.copier.thread.pool.size", INT, 10, _1, CW),
        ("remote.log.manager.copy.max.bytes.per.second", LONG, LONG_MAX, _1, CW),
        ("remote.log.manager.copy.quota.window.num", INT, 11, _1, R),
        ("remote.log.manager.copy.quota.window.size.seconds", INT, 1, _1, R),
        ("remote.log.manager.expiration.thread.pool.size", INT, 10, _1, CW),
        ("remote.log.manager.fetch.max.bytes.per.second", LONG, LONG_MAX, _1, CW),
        ("remote.log.manager.fetch.quota.window.num", INT, 11, _1, R),
        ("remote.log.manager.fetch.quota.window.size.seconds", INT, 1, _1, R),
        ("remote.log.manager.thread.pool.size", INT, 2, _1, R),
        ("remote.log.manager.task.interval.ms", LONG, 30000, _1, R),
        ("remote.log.metadata.manager.class.name", S,
         "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager", _non_empty, R),
        ("remote.log.metadata.manager.class.path", S, None, None, R),
        ("remote.log.metadata.manager.impl.prefix", S, "rlmm.config.", _non_empty, R),
        ("remote.log.metadata.manager.listener.name", S, None, _non_empty, R),
        ("remote.log.metadata.custom.metadata.max.bytes", INT, 128, _0, R),
        ("remote.log.reader.max.pending.tasks", INT, 100, _1, R),
        ("remote.log.reader.threads", INT, 10, _1, CW),
        ("remote.log.storage.manager.class.name", S, None, _non_empty, R),
        ("remote.log.storage.manager.class.path", S, None, None, R),
        ("remote.log.storage.manager.impl.prefix", S, "rsm.config.", _non_empty, R),
        ("remote.log.index.file.cache.total.size.bytes", LONG, 1073741824, _1, CW),
    ]),
    ("of the GSSAPI (Kerberos) and OAUTHBEARER mechanisms and Java login classes; Rill serves PLAIN and SCRAM", [
        ("sasl.kerberos.kinit.cmd", S, "/usr/bin/kinit", None, PB),
        ("sasl.kerberos.min.time.before.relogin", LONG, 60000, None, PB),
        ("sasl.kerberos.principal.to.local.rules", LST, "DEFAULT", None, PB),
        ("sasl.kerberos.service.name", S, None, None, PB),
        ("sasl.kerberos.ticket.renew.jitter", D, 0.05, None, PB),
        ("sasl.kerberos.ticket.renew.window.factor", D, 0.8, None, PB),
        ("sasl.login.refresh.buffer.seconds", SHORT, 300, None, PB),
        ("sasl.login.refresh.min.period.seconds", SHORT, 60, None, PB),
        ("sasl.login.refresh.window.factor", D, 0.8, None, PB),
        ("sasl.login.refresh.window.jitter", D, 0.05, None, PB),
        ("sasl.client.callback.handler.class", C, None, None, R),
        ("sasl.login.callback.handler.class", C, None, None, R),
        ("sasl.login.class", C, None, None, R),
        ("sasl.server.callback.handler.class", C, None, None, R),
        ("sasl.login.connect.timeout.ms", INT, None, None, R),
        ("sasl.login.read.timeout.ms", INT, None, None, R),
        ("sasl.login.retry.backoff.max.ms", LONG, 10000, None, R),
        ("sasl.login.retry.backoff.ms", LONG, 100, None, R),
        ("sasl.oauthbearer.assertion.algorithm", S, "RS256", one_of("ES256", "RS256", ignore_case=True), R),
        ("sasl.oauthbearer.assertion.claim.aud", S, None, None, R),
        ("sasl.oauthbearer.assertion.claim.exp.seconds", INT, 300, between(0, 86400), R),
        ("sasl.oauthbearer.assertion.claim.iss", S, None, None, R),
        ("sasl.oauthbearer.assertion.claim.jti.include", B, "false", None, R),
        ("sasl.oauthbearer.assertion.claim.nbf.seconds", INT, 60, between(0, 3600), R),
        ("sasl.oauthbearer.assertion.claim.sub", S, None, None, R),
        ("sasl.oauthbearer.assertion.file", S, None, None, R),
        ("sasl.oauthbearer.assertion.private.key.file", S, None, None, R),
        ("sasl.oauthbearer.assertion.private.key.passphrase", P, None, None, R),
        ("sasl.oauthbearer.assertion.template.file", S, None, None, R),
        ("sasl.oauthbearer.client.credentials.client.id", S, None, None, R),
        ("sasl.oauthbearer.client.credentials.client.secret", P, None, None, R),
        ("sasl.oauthbearer.clock.skew.seconds", INT, 30, None, R),
        ("sasl.oauthbearer.expected.audience", LST, None, None, R),
        ("sasl.oauthbearer.expected.issuer", S, None, None, R),
        ("sasl.oauthbearer.jwks.endpoint.refresh.ms", LONG, 3600000, None, R),
        ("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", LONG, 10000, None, R),
        ("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", LONG, 100, None, R),
        ("sasl.oauthbearer.jwks.endpoint.url", S, None, None, R),
        ("sasl.oauthbearer.jwt.retriever.class", C, "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever",
         None, R),
        ("sasl.oauthbearer.jwt.validator.class", C, "org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator",
         None, R),
        ("sasl.oauthbearer.scope", S, None, None, R),
        ("sasl.oauthbearer.scope.claim.name", S, "scope", None, R),
        ("sasl.oauthbearer.sub.claim.name", S, "sub", None, R),
        ("sasl.oauthbearer.token.endpoint.url", S, None, None, R),
    ]),
    ("of Java's TLS engine and security providers; Rill's TLS is OpenSSL's, through Python's ssl module", [
        ("ssl.keymanager.algorithm", S, "SunX509", None, PB),
        ("ssl.trustmanager.algorithm", S, "PKIX", None, PB),
        ("ssl.provider", S, None, None, PB),
        ("ssl.engine.factory.class", C, None, None, PB),
        ("ssl.secure.random.implementation", S, None, None, PB),
        ("ssl.allow.dn.changes", B, "false", None, R),
        ("ssl.allow.san.changes", B, "false", None, R),
        ("security.providers", S, None, None, R),
    ]),
    ("of a Java plugin class (a principal builder, policies, quota callback)", [
        ("principal.builder.class", C, "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
         None, PB),
        ("alter.config.policy.class.name", C, None, None, R),
        ("create.topic.policy.class.name", C, None, None, R),
        ("client.quota.callback.class", C, None, None, R),
    ]),
    ("of Java metrics reporters; Rill exports Prometheus metrics (metrics.port)", [
        ("metric.reporters", LST, "org.apache.kafka.common.metrics.JmxReporter", None, CW),
        ("metrics.num.samples", INT, 2, _1, R),
        ("metrics.recording.level", S, "INFO", None, R),
        ("metrics.sample.window.ms", LONG, 30000, _1, R),
        ("kafka.metrics.polling.interval.secs", INT, 10, _1, R),
        ("kafka.metrics.reporters", LST, "", None, R),
    ]),
    ("of features Rill has not built (delegation tokens, replication quotas and the alter-log-dirs quota's windows, "
     "controller mutation quotas, two-phase commit transactions)", [
        ("delegation.token.expiry.time.ms", LONG, 86400000, _1, R),
        ("delegation.token.max.lifetime.ms", LONG, 604800000, _1, R),
        ("delegation.token.secret.key", P, None, None, R),
        ("delegation.token.expiry.check.interval.ms", LONG, 3600000, _1, R),
        ("replication.quota.window.num", INT, 11, _1, R),
        ("replication.quota.window.size.seconds", INT, 1, _1, R),
        ("alter.log.dirs.replication.quota.window.num", INT, 11, _1, R),
        ("alter.log.dirs.replication.quota.window.size.seconds", INT, 1, _1, R),
        ("controller.quota.window.num", INT, 11, _1, R),
        ("controller.quota.window.size.seconds", INT, 1, _1, R),
        ("transaction.two.phase.commit.enable", B, "false", None, R),
    ]),
    ("a tuning of Kafka's own threads, buffers and timers, which Rill's design does not have", [
        ("background.threads", INT, 10, _1, CW),
        ("num.replica.fetchers", INT, 1, None, CW),
        ("num.replica.alter.log.dirs.threads", INT, None, None, R),
        ("log.cleaner.io.buffer.size", INT, 524288, _0, CW),
        ("add.partitions.to.txn.retry.backoff.max.ms", INT, 100, _0, R),
        ("add.partitions.to.txn.retry.backoff.ms", INT, 20, _1, R),
        ("offsets.load.buffer.size", INT, 5242880, _1, R),
        ("offsets.topic.compression.codec", INT, 0, None, R),
        ("transaction.state.log.load.buffer.size", INT, 5242880, _1, R),
        ("replica.fetch.min.bytes", INT, 1, None, R),
        ("replica.fetch.response.max.bytes", INT, 10485760, _0, R),
        ("replica.high.watermark.checkpoint.interval.ms", LONG, 5000, None, R),
        ("replica.socket.receive.buffer.bytes", INT, 65536, None, R),
        ("replica.socket.timeout.ms", INT, 30000, None, R),
        ("request.timeout.ms", INT, 30000, None, R),
        ("delete.records.purgatory.purge.interval.requests", INT, 1, None, R),
        ("fetch.purgatory.purge.interval.requests", INT, 1000, None, R),
        ("producer.purgatory.purge.interval.requests", INT, 1000, None, R),
        ("max.request.partition.size.limit", INT, 2000, _1, R),
        ("socket.connection.setup.timeout.max.ms", LONG, 30000, None, R),
        ("socket.connection.setup.timeout.ms", LONG, 10000, None, R),
        ("socket.listen.backlog.size", INT, 50, _1, R),
    ]),
]  # fmt: skip


def _define(groups: Iterable[tuple[str, list[_Entry]]]) -> tuple[frozenset[str], frozenset[str]]:
    defined: set[str] = set()
    per_broker: set[str] = set()
    for why, entries in groups:
        for name, kind, default, validator, mode in entries:
            if name in BROKER_CONFIGS:
                continue  # Rill's own definition (and use) of the name wins
            doc = f"Kafka's {name}: taken, stored and described, but not used by Rill ({why})."
            BROKER_CONFIGS.define(name, kind, default, doc, validator, Importance.LOW, dynamic=mode != R)
            defined.add(name)
            if mode == PB:
                per_broker.add(name)
    return frozenset(defined), frozenset(per_broker)


KAFKA_ONLY, PER_BROKER_ONLY = _define(_GROUPS)
"""The names defined here (known, stored and described, not used), and those of them Kafka updates only on a
broker's own resource (not as the cluster-wide default)."""
