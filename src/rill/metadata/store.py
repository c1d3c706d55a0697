"""The cluster metadata seam: topics, partitions (leader, leader epoch, replicas, ISR), configs, brokers.

Handlers and the replica manager see metadata only through :class:`MetadataStore`. Reads are synchronous
(the state as of the last change applied on this broker); changes are coroutines that return once the
change is durable and applied, after every listener has been told of it as a :class:`MetadataDelta`.
A change the store refuses raises ``KafkaError`` and changes nothing. A single node uses the embedded store
(a snapshot and a journal of changes in the data directory).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rill.errors import ErrorCode, KafkaError
from rill.metadata.client_quotas import ClientQuotas, QuotaChanges
from rill.security.acl import AccessControlEntry, AclCache, ResourcePattern
from rill.security.scram import ScramCredential

# Kafka's name rules for topics: at most 249 characters of [a-zA-Z0-9._-], and not "." or "..".
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"
log = logging.getLogger(__name__)

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_GROUP_STATE_TOPIC})


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a legal topic name, or None when it is."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    bad = sorted(set(name) - _LEGAL_TOPIC_CHARS)
    if bad:
        return (
            f"topic name {name!r} contains illegal characters {''.join(bad)!r} (allowed: a-z A-Z 0-9 . _ -)"
        )
    return None


def check_assignment(assignments: Mapping[int, Sequence[int]], brokers: Iterable[int]) -> None:
    """Kafka's checks of a new topic's replica assignment: partitions numbered 0..N-1, each with at least one
    replica, on known brokers, none twice, and every partition with as many replicas as the first; anything else
    raises INVALID_REPLICA_ASSIGNMENT."""
    if sorted(assignments) != list(range(len(assignments))):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partition ids must be 0..N-1")
    known = set(brokers)
    sizes = {len(replicas) for replicas in assignments.values()}
    for replicas in assignments.values():
        unknown = [r for r in replicas if r not in known]
        if unknown or len(set(replicas)) != len(replicas) or not replicas:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"invalid replica assignment {list(replicas)}")
    if len(sizes) > 1:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions should have the same number of replicas")


def check_new_topic(
    name: str,
    existing: Mapping[str, object],
    num_partitions: int,
    replication_factor: int,
    assignments: Mapping[int, Sequence[int]] | None,
    brokers: Sequence[int],
) -> None:
    """Kafka's checks of a topic to create, against the ``existing`` topics and the live ``brokers``: a legal name
    not taken and not colliding, then either a valid assignment (``check_assignment``) or at least one partition
    and a replication factor the brokers can hold. Raises KafkaError with Kafka's code."""
    problem = topic_name_problem(name)
    if problem:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if name in existing:
        raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    collision = topic_collision(name, existing)
    if collision:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, collision)
    if assignments:
        check_assignment(assignments, brokers)
        return
    if num_partitions < 1:
        raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    check_replication_factor(replication_factor, len(brokers))


def check_new_partitions(
    name: str, topic: TopicState | None, total: int, assignments: Sequence[Sequence[int]] | None, brokers: Sequence[int]
) -> TopicState:
    """Kafka's checks of a CreatePartitions: the topic exists, ``total`` is an increase, and an assignment gives one
    replica list per new partition, as long as the topic's replication factor, of distinct known brokers.
    Returns the topic."""
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    current = len(topic.partitions)
    if total <= current:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS, f"Topic currently has {current} partitions, {total} would not be an increase."
        )
    if not assignments:
        return topic
    if len(assignments) != total - current:
        raise KafkaError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Increasing the number of partitions by {total - current} but {len(assignments)} assignments provided.",
        )
    known = set(brokers)
    for replicas in assignments:
        if not replicas or len(set(replicas)) != len(replicas) or any(r not in known for r in replicas):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"invalid replica assignment {list(replicas)}")
        if len(replicas) != topic.replication_factor:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment {list(replicas)} does not have the topic's replication factor "
                f"{topic.replication_factor}.",
            )
    return topic


def check_replication_factor(replication_factor: int, brokers: int) -> None:
    """At least one replica, and no more than there are live brokers (INVALID_REPLICATION_FACTOR)."""
    if replication_factor < 1:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > brokers:
        raise KafkaError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {replication_factor} time(s): the number of live brokers is "
            f"{brokers}.",
        )


def topic_collision(name: str, existing: Iterable[str]) -> str | None:
    """Why ``name`` may not be created beside the ``existing`` topics: one of them differs from it only in
    '.' against '_' (the two read the same in metric names), which Kafka refuses; None when none does. The
    least such name is given, so that the message does not depend on the order of ``existing``."""
    if "." not in name and "_" not in name:
        return None
    key = name.replace(".", "_")
    other = min((t for t in existing if t != name and t.replace(".", "_") == key), default=None)
    return None if other is None else f"Topic '{name}' collides with existing topic: {other}"


def valid_stored_configs(topic: str, configs: Mapping[str, str]) -> dict[str, str]:
    """The stored configs of ``topic`` that validate; each one that does not (written by another version, or
    refused by this one) is logged and set aside: loading the metadata never fails on it."""
    from rill.config import validate_topic_configs
    from rill.errors import KafkaError

    kept: dict[str, str] = {}
    for name, value in configs.items():
        try:
            validate_topic_configs({name: value})
        except KafkaError as e:
            log.warning("Topic %s: stored config %s=%r set aside, the default applies: %s", topic, name, value,
                        e.message)  # fmt: skip
            continue
        kept[name] = value
    return kept


def dynamic_broker_configs(store: MetadataStore) -> dict[str, str]:
    """The dynamic configs in force on this broker: its own over the cluster-wide defaults."""
    merged = dict(store.default_broker_configs())
    merged.update(store.broker_configs())
    return merged


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: ``host``/``port`` is where other brokers reach it (its inter-broker listener);
    ``endpoints`` every advertised listener as (name, host, port, security protocol)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int, str], ...] = ()

    def endpoint(self, listener_name: str) -> tuple[str, int] | None:
        """Where clients of ``listener_name`` reach this broker (None: it has no such listener); a broker
        registered without endpoints is reached at ``host``/``port`` on every listener."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port, _ in self.endpoints:
            if name == listener_name:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    partition_epoch: int = 0
    adding_replicas: tuple[int, ...] = ()  # a reassignment under way: replicas being added, and removed
    removing_replicas: tuple[int, ...] = ()


def is_older(state: PartitionState, than: PartitionState) -> bool:
    """Whether ``state`` is older than ``than``: a lower leader epoch, or the same and a lower partition epoch (the
    version of the partition's state in the cluster's metadata). A state never goes back to an older one."""
    return (state.leader_epoch, state.partition_epoch) < (than.leader_epoch, than.partition_epoch)


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionState, ...]
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


# Kafka's bound on the partitions one CreateTopics or CreatePartitions request may create (its controller's
# MAX_PARTITIONS_PER_BATCH): a request over it is refused whole with POLICY_VIOLATION before any work.
MAX_PARTITIONS_PER_REQUEST = 10_000


@dataclass(frozen=True, slots=True)
class MetadataDelta:
    """One change as the broker learns of it: the metadata offset it brought the store to, the topics it
    created or changed (their new state), the topics it deleted (their last state), and whether the dynamic
    broker configs changed."""

    offset: int
    changed: tuple[TopicState, ...] = ()
    deleted: tuple[TopicState, ...] = ()
    broker_configs: bool = False


MetadataListener = Callable[[MetadataDelta], Awaitable[None]]


class MetadataStore(Protocol):
    """What the broker needs to know and change about the cluster."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self) -> list[BrokerInfo]: ...

    def topics(self) -> Mapping[str, TopicState]: ...

    def topic(self, name: str) -> TopicState | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicState | None: ...

    @property
    def offset(self) -> int:
        """The offset of the last change applied (0 before any)."""
        ...

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
    ) -> TopicState: ...

    async def delete_topic(self, name: str) -> TopicState: ...

    async def delete_topics(self, names: Sequence[str]) -> list[TopicState]:
        """Delete these topics in one change (every one must exist, else nothing is deleted)."""
        ...

    async def create_partitions(
        self, name: str, total: int, assignments: Sequence[list[int]] | None = None, *, validate_only: bool = False
    ) -> TopicState:
        """Grow ``name`` to ``total`` partitions (``assignments``: the replicas of each new one), or only check
        that it could be done."""
        ...

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...

    def broker_configs(self) -> Mapping[str, str]:
        """This broker's dynamic configs (resource ``<node id>``)."""
        ...

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None: ...

    def default_broker_configs(self) -> Mapping[str, str]:
        """The cluster-wide dynamic defaults (resource ``""``), below every broker's own."""
        ...

    async def set_default_broker_configs(self, configs: Mapping[str, str]) -> None: ...

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        """A group's dynamic configs (GROUP resources: ``consumer.session.timeout.ms``, ...)."""
        ...

    async def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None: ...

    def groups_with_configs(self) -> list[str]:
        """The groups that have dynamic configs of their own, sorted."""
        ...

    def client_metrics_configs(self) -> Mapping[str, Mapping[str, str]]:
        """Every client metrics subscription (CLIENT_METRICS resources of KIP-714) by name: its configs as
        stored (``metrics``, ``interval.ms``, ``match``)."""
        ...

    async def set_client_metrics_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a subscription's configs (empty: remove it); the caller validated them. Returns once in effect
        here."""
        ...

    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids durably; returns the first."""
        ...

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The user's SCRAM credential for ``mechanism`` (SCRAM-SHA-256 or SCRAM-SHA-512), or None."""
        ...

    def scram_credentials(self, user: str) -> Mapping[str, ScramCredential]:
        """Every SCRAM credential of ``user``, by mechanism."""
        ...

    def scram_users(self) -> list[str]:
        """The users with at least one SCRAM credential, sorted."""
        ...

    async def alter_scram_credentials(self, changes: Mapping[str, Mapping[str, ScramCredential | None]]) -> None:
        """Set (or, for None, delete) users' SCRAM credentials in one change; the caller validated them."""
        ...

    def acls(self) -> AclCache:
        """Every ACL, as of the last change this broker has seen (written through any broker)."""
        ...

    async def alter_acls(self, changes: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        """Set each resource pattern's complete entries (empty: it has none any more) in one change; returns once
        this broker's :meth:`acls` shows it. The caller validated them."""
    def client_quotas(self) -> ClientQuotas:
        """Every client quota entity's quotas (read on each request: its ``version`` tells of changes)."""
        ...

    async def alter_client_quotas(self, changes: QuotaChanges) -> None:
        """Set or remove client quotas in one change; the caller validated them. Returns once in effect here."""
        ...

    def add_listener(self, listener: MetadataListener) -> None:
        """Call ``listener`` with every change, after it is durable and before the change returns."""
        ...

    async def close(self) -> None:
        """Stop, letting what is under way finish."""
        ...

    def close_now(self) -> None:
        """Stop at once (a crash, or a start that failed)."""
        ...
