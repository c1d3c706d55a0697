"""Every broker config name Kafka defines is one Rill knows: a server.properties or an admin client that sets one is
understood (the value checked as Kafka checks it, stored, described), never refused as unknown. The names are those of
Kafka 4.1's generated broker config reference."""

from __future__ import annotations

from rill.config import BROKER_CONFIGS, BrokerConfig, ConfigSource, describe_broker_configs
from rill.config.kafka_definitions import KAFKA_ONLY, PER_BROKER_ONLY

_NAMES = """
    node.id process.roles add.partitions.to.txn.retry.backoff.max.ms add.partitions.to.txn.retry.backoff.ms
    advertised.listeners auto.create.topics.enable auto.leader.rebalance.enable background.threads broker.id
    compression.type controller.listener.names controller.quorum.bootstrap.servers
    controller.quorum.election.backoff.max.ms controller.quorum.election.timeout.ms
    controller.quorum.fetch.timeout.ms controller.quorum.voters delete.topic.enable early.start.listeners
    group.coordinator.threads leader.imbalance.check.interval.seconds listeners log.dir log.dirs
    log.flush.interval.messages log.flush.interval.ms log.flush.offset.checkpoint.interval.ms
    log.flush.scheduler.interval.ms log.flush.start.offset.checkpoint.interval.ms log.retention.bytes
    log.retention.hours log.retention.minutes log.retention.ms log.roll.hours log.roll.jitter.hours
    log.roll.jitter.ms log.roll.ms log.segment.bytes log.segment.delete.delay.ms message.max.bytes metadata.log.dir
    metadata.log.max.record.bytes.between.snapshots metadata.log.max.snapshot.interval.ms metadata.log.segment.bytes
    metadata.log.segment.ms metadata.max.retention.bytes metadata.max.retention.ms min.insync.replicas
    num.io.threads num.network.threads num.recovery.threads.per.data.dir num.replica.alter.log.dirs.threads
    num.replica.fetchers offset.metadata.max.bytes offsets.commit.timeout.ms offsets.load.buffer.size
    offsets.retention.check.interval.ms offsets.retention.minutes offsets.topic.compression.codec
    offsets.topic.num.partitions offsets.topic.replication.factor offsets.topic.segment.bytes queued.max.requests
    replica.fetch.min.bytes replica.fetch.wait.max.ms replica.high.watermark.checkpoint.interval.ms
    replica.lag.time.max.ms replica.socket.receive.buffer.bytes replica.socket.timeout.ms request.timeout.ms
    sasl.mechanism.controller.protocol share.coordinator.load.buffer.size
    share.coordinator.state.topic.compression.codec share.coordinator.state.topic.min.isr
    share.coordinator.state.topic.num.partitions share.coordinator.state.topic.replication.factor
    share.coordinator.state.topic.segment.bytes share.coordinator.write.timeout.ms socket.receive.buffer.bytes
    socket.request.max.bytes socket.send.buffer.bytes transaction.max.timeout.ms
    transaction.state.log.load.buffer.size transaction.state.log.min.isr transaction.state.log.num.partitions
    transaction.state.log.replication.factor transaction.state.log.segment.bytes transactional.id.expiration.ms
    unclean.leader.election.enable broker.heartbeat.interval.ms broker.rack broker.session.timeout.ms
    compression.gzip.level compression.lz4.level compression.zstd.level connections.max.idle.ms
    connections.max.reauth.ms controlled.shutdown.enable controller.quorum.append.linger.ms
    controller.quorum.request.timeout.ms controller.socket.timeout.ms default.replication.factor
    delegation.token.expiry.time.ms delegation.token.max.lifetime.ms delegation.token.secret.key
    delete.records.purgatory.purge.interval.requests fetch.max.bytes fetch.purgatory.purge.interval.requests
    group.consumer.assignors group.consumer.heartbeat.interval.ms group.consumer.max.heartbeat.interval.ms
    group.consumer.max.session.timeout.ms group.consumer.max.size group.consumer.migration.policy
    group.consumer.min.heartbeat.interval.ms group.consumer.min.session.timeout.ms group.consumer.session.timeout.ms
    group.coordinator.append.linger.ms group.coordinator.rebalance.protocols group.initial.rebalance.delay.ms
    group.max.session.timeout.ms group.max.size group.min.session.timeout.ms group.share.assignors
    group.share.delivery.count.limit group.share.heartbeat.interval.ms group.share.max.heartbeat.interval.ms
    group.share.max.record.lock.duration.ms group.share.max.session.timeout.ms group.share.max.share.sessions
    group.share.max.size group.share.min.heartbeat.interval.ms group.share.min.record.lock.duration.ms
    group.share.min.session.timeout.ms group.share.partition.max.record.locks group.share.record.lock.duration.ms
    group.share.session.timeout.ms group.streams.heartbeat.interval.ms group.streams.max.heartbeat.interval.ms
    group.streams.max.session.timeout.ms group.streams.max.size group.streams.max.standby.replicas
    group.streams.min.heartbeat.interval.ms group.streams.min.session.timeout.ms group.streams.num.standby.replicas
    group.streams.session.timeout.ms initial.broker.registration.timeout.ms inter.broker.listener.name
    log.cleaner.backoff.ms log.cleaner.dedupe.buffer.size log.cleaner.delete.retention.ms log.cleaner.enable
    log.cleaner.io.buffer.load.factor log.cleaner.io.buffer.size log.cleaner.io.max.bytes.per.second
    log.cleaner.max.compaction.lag.ms log.cleaner.min.cleanable.ratio log.cleaner.min.compaction.lag.ms
    log.cleaner.threads log.cleanup.policy log.index.interval.bytes log.index.size.max.bytes
    log.local.retention.bytes log.local.retention.ms log.message.timestamp.after.max.ms
    log.message.timestamp.before.max.ms log.message.timestamp.type log.preallocate log.retention.check.interval.ms
    max.connection.creation.rate max.connections max.connections.per.ip max.connections.per.ip.overrides
    max.incremental.fetch.session.cache.slots max.request.partition.size.limit num.partitions
    principal.builder.class producer.purgatory.purge.interval.requests queued.max.request.bytes
    remote.fetch.max.wait.ms remote.list.offsets.request.timeout.ms remote.log.manager.copier.thread.pool.size
    remote.log.manager.copy.max.bytes.per.second remote.log.manager.copy.quota.window.num
    remote.log.manager.copy.quota.window.size.seconds remote.log.manager.expiration.thread.pool.size
    remote.log.manager.fetch.max.bytes.per.second remote.log.manager.fetch.quota.window.num
    remote.log.manager.fetch.quota.window.size.seconds remote.log.manager.thread.pool.size
    remote.log.metadata.manager.class.name remote.log.metadata.manager.class.path
    remote.log.metadata.manager.impl.prefix remote.log.metadata.manager.listener.name
    remote.log.reader.max.pending.tasks remote.log.reader.threads remote.log.storage.manager.class.name
    remote.log.storage.manager.class.path remote.log.storage.manager.impl.prefix remote.log.storage.system.enable
    replica.fetch.backoff.ms replica.fetch.max.bytes replica.fetch.response.max.bytes replica.selector.class
    sasl.client.callback.handler.class sasl.enabled.mechanisms sasl.jaas.config sasl.kerberos.kinit.cmd
    sasl.kerberos.min.time.before.relogin sasl.kerberos.principal.to.local.rules sasl.kerberos.service.name
    sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor sasl.login.callback.handler.class
    sasl.login.class sasl.login.refresh.buffer.seconds sasl.login.refresh.min.period.seconds
    sasl.login.refresh.window.factor sasl.login.refresh.window.jitter sasl.mechanism.inter.broker.protocol
    sasl.oauthbearer.assertion.algorithm sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.iss
    sasl.oauthbearer.assertion.claim.jti.include sasl.oauthbearer.assertion.claim.sub
    sasl.oauthbearer.assertion.file sasl.oauthbearer.assertion.private.key.file
    sasl.oauthbearer.assertion.private.key.passphrase sasl.oauthbearer.assertion.template.file
    sasl.oauthbearer.client.credentials.client.id sasl.oauthbearer.client.credentials.client.secret
    sasl.oauthbearer.jwks.endpoint.url sasl.oauthbearer.jwt.retriever.class sasl.oauthbearer.jwt.validator.class
    sasl.oauthbearer.scope sasl.oauthbearer.token.endpoint.url sasl.server.callback.handler.class
    sasl.server.max.receive.size security.inter.broker.protocol share.coordinator.append.linger.ms
    share.coordinator.snapshot.update.records.per.snapshot share.coordinator.threads
    share.fetch.purgatory.purge.interval.requests socket.connection.setup.timeout.max.ms
    socket.connection.setup.timeout.ms socket.listen.backlog.size ssl.cipher.suites ssl.client.auth
    ssl.enabled.protocols ssl.key.password ssl.keymanager.algorithm ssl.keystore.certificate.chain ssl.keystore.key
    ssl.keystore.location ssl.keystore.password ssl.keystore.type ssl.protocol ssl.provider
    ssl.trustmanager.algorithm ssl.truststore.certificates ssl.truststore.location ssl.truststore.password
    ssl.truststore.type alter.config.policy.class.name alter.log.dirs.replication.quota.window.num
    alter.log.dirs.replication.quota.window.size.seconds authorizer.class.name client.quota.callback.class
    connection.failed.authentication.delay.ms controller.quorum.retry.backoff.ms controller.quota.window.num
    controller.quota.window.size.seconds create.topic.policy.class.name delegation.token.expiry.check.interval.ms
    kafka.metrics.polling.interval.secs kafka.metrics.reporters listener.security.protocol.map
    log.dir.failure.timeout.ms metadata.max.idle.interval.ms metric.reporters metrics.num.samples
    metrics.recording.level metrics.sample.window.ms producer.id.expiration.ms quota.window.num
    quota.window.size.seconds remote.log.index.file.cache.total.size.bytes remote.log.manager.task.interval.ms
    remote.log.metadata.custom.metadata.max.bytes replication.quota.window.num replication.quota.window.size.seconds
    sasl.login.connect.timeout.ms sasl.login.read.timeout.ms sasl.login.retry.backoff.max.ms
    sasl.login.retry.backoff.ms sasl.oauthbearer.assertion.claim.exp.seconds
    sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.clock.skew.seconds
    sasl.oauthbearer.expected.audience sasl.oauthbearer.expected.issuer sasl.oauthbearer.jwks.endpoint.refresh.ms
    sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.ms
    sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name security.providers ssl.allow.dn.changes
    ssl.allow.san.changes ssl.endpoint.identification.algorithm ssl.engine.factory.class ssl.principal.mapping.rules
    ssl.secure.random.implementation telemetry.max.bytes transaction.abort.timed.out.transaction.cleanup.interval.ms
    transaction.partition.verification.enable transaction.remove.expired.transaction.cleanup.interval.ms
    transaction.two.phase.commit.enable
"""
KAFKA_BROKER_CONFIGS = _NAMES.split()


def test_every_kafka_broker_config_name_is_known() -> None:
    assert len(KAFKA_BROKER_CONFIGS) == 316
    assert [n for n in KAFKA_BROKER_CONFIGS if n not in BROKER_CONFIGS] == []


def test_kafkas_types_defaults_and_update_modes() -> None:
    relogin = BROKER_CONFIGS["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.type.name, relogin.default, relogin.dynamic) == ("LONG", 60000, True)
    assert "sasl.kerberos.min.time.before.relogin" in PER_BROKER_ONLY
    assert BROKER_CONFIGS["background.threads"].dynamic and "background.threads" not in PER_BROKER_ONLY
    assert not BROKER_CONFIGS["process.roles"].dynamic
    assert BROKER_CONFIGS["principal.builder.class"].type.name == "CLASS"
    assert BROKER_CONFIGS["delegation.token.secret.key"].type.name == "PASSWORD"
    assert set(KAFKA_BROKER_CONFIGS) >= KAFKA_ONLY


def test_a_kafka_only_config_is_described_as_not_used() -> None:
    config = BrokerConfig.from_properties({"sasl.kerberos.service.name": "kafka"})
    assert config.unknown == ()
    entries = {e.name: e for e in describe_broker_configs(config, {"background.threads": "4"})}
    service = entries["sasl.kerberos.service.name"]
    assert (service.value, service.source) == ("kafka", ConfigSource.STATIC_BROKER_CONFIG)
    assert "not used by Rill" in service.documentation
    threads = entries["background.threads"]
    assert (threads.value, threads.source, threads.read_only) == ("4", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
