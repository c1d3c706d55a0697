"""What the console asks a cluster, as a Kafka client with one identity (confluent-kafka's AdminClient, and
Rill's own client for the APIs librdkafka lacks: DescribeLogDirs, transactions). Blocking calls, each
bounded by ``timeout_s``; answers are plain values for the templates. Nothing here is Rill-specific beyond
the wire protocol, so it works against any Kafka-compatible cluster; an API a cluster lacks is reported as
``Unsupported`` and its page says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka.admin as _admin
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)
ck: Any = _admin  # librdkafka's admin types, used untyped (the package exports them implicitly)


class ConsoleError(Exception):
    """A request the cluster refused or could not answer; the message is for the person using the console."""


class Unsupported(ConsoleError):
    """The cluster does not serve the API a page needs."""


def _wait(future: Any, timeout_s: float, what: str) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as e:
        err: Any = e.args[0] if e.args else None
        name = err.name() if err is not None and hasattr(err, "name") else ""
        text = err.str() if err is not None and hasattr(err, "str") else str(e)
        if name in ("UNSUPPORTED_VERSION", "INVALID_REQUEST") or "not supported" in text.lower():
            raise Unsupported(f"{what}: the cluster does not support it ({text})") from None
        raise ConsoleError(f"{what}: {text}") from None
    except TimeoutError:
        raise ConsoleError(f"{what}: no answer within {timeout_s:g} s") from None
    except Exception as e:  # a client-side refusal (bad argument)
        raise ConsoleError(f"{what}: {e}") from None


@dataclass
class Broker:
    node_id: int
    host: str | None
    port: int
    rack: str | None
    controller: bool
    up: bool = True


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    start: int = -1
    end: int = -1

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass
class TopicInfo:
    name: str
    internal: bool
    partitions: list[PartitionInfo]
    configs: dict[str, Any] = field(default_factory=dict)
    size_bytes: int | None = None

    @property
    def replication(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


@dataclass
class GroupInfo:
    group_id: str
    state: str
    kind: str
    members: list[dict[str, Any]] = field(default_factory=list)
    lag: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)  # tp -> (committed, end, lag)

    @property
    def total_lag(self) -> int:
        return sum(max(lag, 0) for _, _, lag in self.lag.values())


class ConsoleCluster:
    """One identity's view of the cluster (``config``: librdkafka settings, bootstrap and security)."""

    def __init__(self, config: dict[str, Any], timeout_s: float = 15.0) -> None:
        self.config = dict(config)
        self.timeout_s = timeout_s
        self.admin = AdminClient({**self.config, "log_level": 3})

    def _wait(self, future: Any, what: str) -> Any:
        return _wait(future, self.timeout_s, what)

    # -- cluster -------------------------------------------------------------------------------------------

    def topics(self) -> list[TopicInfo]:
        """Every topic the identity may describe (one Metadata request)."""
        md = self._metadata()
        return sorted((self._topic_of(t) for t in md.topics.values() if not t.error), key=lambda t: t.name)

    def overview(self) -> tuple[str, list[Broker], list[TopicInfo]]:
        """The cluster id, its live brokers (a broker seen before and gone is not listed: ``brokers_seen``
        says who is down) and every topic the identity may describe."""
        md = self._metadata()
        controller = getattr(md, "controller_id", -1)
        brokers = sorted((Broker(b.id, b.host, b.port, None, b.id == controller) for b in md.brokers.values()),
                         key=lambda b: b.node_id)  # fmt: skip
        try:
            desc = self._wait(self.admin.describe_cluster(request_timeout=self.timeout_s), "DescribeCluster")
            racks = {n.id: n.rack for n in desc.nodes}
            for b in brokers:
                b.rack = racks.get(b.node_id)
                b.controller = desc.controller is not None and desc.controller.id == b.node_id
        except ConsoleError:
            pass
        topics = [self._topic_of(t) for t in md.topics.values() if not t.error]
        return str(md.cluster_id or ""), brokers, sorted(topics, key=lambda t: t.name)

    def _metadata(self, topic: str | None = None) -> Any:
        try:
            return self.admin.list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as e:
            err: Any = e.args[0] if e.args else None
            raise ConsoleError(f"Metadata: {err.str() if err is not None and hasattr(err, 'str') else e}") from None

    @staticmethod
    def _topic_of(t: Any) -> TopicInfo:
        parts = [PartitionInfo(p.id, p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()]
        return TopicInfo(t.topic, t.topic.startswith("__"), sorted(parts, key=lambda p: p.partition))

    def topic(self, name: str) -> TopicInfo:
        md = self._metadata(name)
        t = md.topics.get(name)
        if t is None or t.error is not None:
            raise ConsoleError(f"topic {name}: {t.error.str() if t is not None and t.error else 'not found'}")
        info = self._topic_of(t)
        tps = [TopicPartition(name, p.partition) for p in info.partitions]
        starts = self.offsets(tps, ck.OffsetSpec.earliest())
        ends = self.offsets(tps, ck.OffsetSpec.latest())
        for p in info.partitions:
            p.start, p.end = starts.get(p.partition, -1), ends.get(p.partition, -1)
        info.configs = self.configs(ck.ConfigResource.Type.TOPIC, name)
        return info

    def offsets(self, tps: list[TopicPartition], spec: Any) -> dict[int, int]:
        if not tps:
            return {}
        futures = self.admin.list_offsets({tp: spec for tp in tps}, request_timeout=self.timeout_s)
        out: dict[int, int] = {}
        for tp, future in futures.items():
            try:
                out[tp.partition] = int(self._wait(future, "ListOffsets").offset)
            except ConsoleError:
                out[tp.partition] = -1
        return out

    def configs(self, kind: Any, name: str) -> dict[str, Any]:
        [future] = self.admin.describe_configs([ck.ConfigResource(kind, name)], request_timeout=self.timeout_s).values()
        entries = self._wait(future, f"DescribeConfigs {name}")
        return {k: e for k, e in sorted(entries.items())}

    # -- topic changes ---------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication: int, configs: dict[str, str]) -> None:
        new = ck.NewTopic(name, partitions, replication, config=configs)
        [future] = self.admin.create_topics([new], request_timeout=self.timeout_s).values()
        self._wait(future, f"CreateTopics {name}")
        self._until_partitions(name, partitions)

    def _until_partitions(self, name: str, count: int) -> None:
        """Wait (at most the request timeout) until the metadata shows ``count`` partitions of ``name`` with a
        leader: the broker that created them answers first, the others learn of them a moment later, and the
        page the console goes to next may ask any of them."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            try:
                t = self._metadata(name).topics.get(name)
            except ConsoleError:
                t = None
            if t is not None and t.error is None and sum(p.leader >= 0 for p in t.partitions.values()) >= count:
                return
            time.sleep(0.1)

    def delete_topic(self, name: str) -> None:
        [future] = self.admin.delete_topics([name], request_timeout=self.timeout_s).values()
        self._wait(future, f"DeleteTopics {name}")

    def add_partitions(self, name: str, total: int) -> None:
        new = [ck.NewPartitions(name, total)]
        [future] = self.admin.create_partitions(new, request_timeout=self.timeout_s).values()
        self._wait(future, f"CreatePartitions {name}")
        self._until_partitions(name, total)

    def delete_records(self, name: str, partition: int, before: int) -> None:
        [future] = self.admin.delete_records([TopicPartition(name, partition, before)],
                                             request_timeout=self.timeout_s).values()  # fmt: skip
        self._wait(future, f"DeleteRecords {name}-{partition}")

    def alter_topic_configs(self, name: str, sets: dict[str, str], deletes: Iterable[str], validate: bool) -> None:
        entries = [ck.ConfigEntry(k, v, incremental_operation=ck.AlterConfigOpType.SET) for k, v in sets.items()]
        entries += [ck.ConfigEntry(k, None, incremental_operation=ck.AlterConfigOpType.DELETE) for k in deletes]
        resource = ck.ConfigResource(ck.ConfigResource.Type.TOPIC, name, incremental_configs=entries)
        [future] = self.admin.incremental_alter_configs([resource], validate_only=validate,
                                                        request_timeout=self.timeout_s).values()  # fmt: skip
        self._wait(future, f"IncrementalAlterConfigs {name}")

    # -- groups ---------------------------------------------------------------------------------------------

    def groups(self) -> list[GroupInfo]:
        listed = self._wait(self.admin.list_consumer_groups(request_timeout=self.timeout_s), "ListGroups")
        out = []
        for g in listed.valid:
            state = getattr(g.state, "name", str(g.state))
            kind = getattr(getattr(g, "type", None), "name", "CLASSIC")
            out.append(GroupInfo(g.group_id, state, kind))
        return sorted(out, key=lambda g: g.group_id)

    def group(self, group_id: str) -> GroupInfo:
        [future] = self.admin.describe_consumer_groups([group_id], request_timeout=self.timeout_s).values()
        desc = self._wait(future, f"DescribeGroups {group_id}")
        state = getattr(desc.state, "name", str(desc.state))
        kind = getattr(getattr(desc, "type", None), "name", "CLASSIC")
        members = [{"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                    "assignment": sorted(f"{tp.topic}-{tp.partition}" for tp in
                                         (m.assignment.topic_partitions if m.assignment else []))}
                   for m in desc.members]  # fmt: skip
        info = GroupInfo(group_id, state, kind, members)
        info.lag = self.lag(group_id)
        return info

    def committed(self, group_id: str) -> dict[tuple[str, int], int]:
        [future] = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                          request_timeout=self.timeout_s).values()  # fmt: skip
        result = self._wait(future, f"OffsetFetch {group_id}")
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    def committed_many(self, group_ids: list[str]) -> dict[str, dict[tuple[str, int], int]]:
        """The committed offsets of several groups, asked all at once (one round trip of waiting)."""
        futures = {}
        for g in group_ids:
            [future] = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)],
                                                              request_timeout=self.timeout_s).values()  # fmt: skip
            futures[g] = future
        out: dict[str, dict[tuple[str, int], int]] = {}
        for g, future in futures.items():
            try:
                result = self._wait(future, f"OffsetFetch {g}")
            except ConsoleError:
                continue
            out[g] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}
        return out

    def lag(self, group_id: str) -> dict[tuple[str, int], tuple[int, int, int]]:
        committed = self.committed(group_id)
        ends = {}
        by_topic: dict[str, list[TopicPartition]] = {}
        for topic, partition in committed:
            by_topic.setdefault(topic, []).append(TopicPartition(topic, partition))
        for topic, tps in by_topic.items():
            for partition, end in self.offsets(tps, ck.OffsetSpec.latest()).items():
                ends[(topic, partition)] = end
        return {tp: (off, ends.get(tp, -1), ends.get(tp, -1) - off) for tp, off in sorted(committed.items())}

    def reset_plan(self, group_id: str, topic: str, to: str, value: str = "") -> dict[int, tuple[int, int]]:
        """partition -> (current committed offset, the offset a reset would commit)."""
        info = self.topic(topic)
        tps = [TopicPartition(topic, p.partition) for p in info.partitions]
        if to == "earliest":
            target = self.offsets(tps, ck.OffsetSpec.earliest())
        elif to == "latest":
            target = self.offsets(tps, ck.OffsetSpec.latest())
        elif to == "timestamp":
            target = self.offsets(tps, ck.OffsetSpec.for_timestamp(int(value)))
            ends = self.offsets(tps, ck.OffsetSpec.latest())
            target = {p: (o if o >= 0 else ends[p]) for p, o in target.items()}
        elif to == "offset":
            target = {p.partition: min(max(int(value), p.start), p.end) for p in info.partitions}
        else:
            raise ConsoleError(f"reset to {to!r}: earliest, latest, timestamp or offset")
        current = self.committed(group_id)
        return {p: (current.get((topic, p), -1), o) for p, o in sorted(target.items())}

    def reset_offsets(self, group_id: str, topic: str, plan: dict[int, tuple[int, int]]) -> None:
        tps = [TopicPartition(topic, p, new) for p, (_, new) in plan.items()]
        [future] = self.admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id, tps)],
                                                           request_timeout=self.timeout_s).values()  # fmt: skip
        self._wait(future, f"OffsetCommit {group_id}")

    def delete_group(self, group_id: str) -> None:
        [future] = self.admin.delete_consumer_groups([group_id], request_timeout=self.timeout_s).values()
        self._wait(future, f"DeleteGroups {group_id}")

    # -- ACLs and users ---------------------------------------------------------------------------------------

    def acls(self) -> list[Any]:
        flt = ck.AclBindingFilter(ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, None, None,
                                  ck.AclOperation.ANY, ck.AclPermissionType.ANY)  # fmt: skip
        found = self._wait(self.admin.describe_acls(flt, request_timeout=self.timeout_s), "DescribeAcls")
        return sorted(found, key=lambda b: (str(b.restype), b.name, b.principal, str(b.operation)))

    @staticmethod
    def binding(resource_type: str, name: str, pattern: str, principal: str, host: str, operation: str,
                permission: str) -> Any:  # fmt: skip
        try:
            return ck.AclBinding(ck.ResourceType[resource_type.upper()], name, ck.ResourcePatternType[pattern.upper()],
                              principal, host or "*", ck.AclOperation[operation.upper()],
                              ck.AclPermissionType[permission.upper()])  # fmt: skip
        except (KeyError, ValueError) as e:
            raise ConsoleError(f"not an ACL: {e}") from None

    def create_acl(self, binding: Any) -> None:
        [future] = self.admin.create_acls([binding], request_timeout=self.timeout_s).values()
        self._wait(future, "CreateAcls")

    def delete_acl(self, binding: Any) -> None:
        flt = ck.AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type, binding.principal,
                               binding.host, binding.operation, binding.permission_type)  # fmt: skip
        [future] = self.admin.delete_acls([flt], request_timeout=self.timeout_s).values()
        self._wait(future, "DeleteAcls")

    def users(self) -> dict[str, list[tuple[str, int]]]:
        future = self.admin.describe_user_scram_credentials(request_timeout=self.timeout_s)
        described = self._wait(future, "DescribeUserScramCredentials")
        return {user: [(str(getattr(c.mechanism, "name", c.mechanism)), c.iterations)
                       for c in d.scram_credential_infos] for user, d in sorted(described.items())}  # fmt: skip

    def set_user(self, user: str, mechanism: str, password: str, iterations: int) -> None:
        info = ck.ScramCredentialInfo(ck.ScramMechanism[mechanism.replace("-", "_")], iterations)
        [future] = self.admin.alter_user_scram_credentials(
            [ck.UserScramCredentialUpsertion(user, info, password.encode())], request_timeout=self.timeout_s
        ).values()
        self._wait(future, f"AlterUserScramCredentials {user}")

    def delete_user(self, user: str, mechanism: str) -> None:
        deletion = ck.UserScramCredentialDeletion(user, ck.ScramMechanism[mechanism.replace("-", "_")])
        [future] = self.admin.alter_user_scram_credentials([deletion], request_timeout=self.timeout_s).values()
        self._wait(future, f"AlterUserScramCredentials {user}")

    def describe_topics(self, names: list[str]) -> dict[str, Any]:
        futures = self.admin.describe_topics(TopicCollection(names), request_timeout=self.timeout_s)
        return {name: self._wait(f, f"DescribeTopics {name}") for name, f in futures.items()}

    def close(self) -> None:
        pass
