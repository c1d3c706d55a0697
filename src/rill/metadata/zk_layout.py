"""The znodes of a Rill cluster in ZooKeeper, in the spirit of Kafka 2.x, and their JSON payloads (no I/O).

All paths are below the chroot of ``zookeeper.connect`` (``host:port/chroot``):

==========================================  =========================================================================
``/cluster/id``                             ``{"version": "1", "id": <cluster id>}``: made once, by the first broker
``/brokers/ids/<id>``                       ephemeral, one per live broker: ``{"version": 5, "host", "port",
                                            "endpoints": ["NAME://host:port", ...], "listener_security_protocol_map":
                                            {NAME: PROTOCOL}, "rack", "timestamp"}`` (host and port: the
                                            inter-broker listener's)
``/config/users/<user>``                    a user's SCRAM credentials (``zk_users``)
``/config/client-metrics/<name>``           a client metrics subscription (KIP-714): ``{"version": 1, "config":
                                            {"metrics", "interval.ms", "match"}}``, changes announced under
                                            ``/config/changes`` (``zk_client_metrics``)
``/kafka-acl/<Type>/<name>``                 a literal resource's ACLs; prefixed ones under
                                            ``/kafka-acl-extended/prefixed/<Type>/<name>``, changes announced
                                            under ``/kafka-acl-changes`` and ``/kafka-acl-extended-changes``
                                            (``zk_acls``)
``/config/users/<user>/clients/<client>``,  client quotas: ``{"version": 1, "config": {"producer_byte_rate": ...}}``
``/config/clients/<client>``                (and at ``/config/users/<user>``), ``<default>`` for a level's default;
                                            each change announced by ``/config/changes/config_change_<seq>``
                                            (``zk_quotas``)
``/controller``                             ephemeral: ``{"version": 1, "brokerid": <id>, "timestamp"}``
``/controller_epoch``                       the controller epoch, a decimal number; every write of the controller
                                            checks this znode's version, so a stale controller's writes fail
``/brokers/topics/<topic>``                 the assignment: ``{"version": 3, "topic_id": <uuid>, "partitions":
                                            {"0": [replicas], ...}, "adding_replicas": {...},
                                            "removing_replicas": {...}}``
``/brokers/topics/<topic>/partitions/<p>/state``  the partition's state: ``{"version": 1, "leader", "leader_epoch",
                                            "isr": [...], "controller_epoch"}``; its znode version is the
                                            partition epoch, and every change is conditional on it
``/config/topics/<topic>``                  ``{"version": 1, "config": {name: value}}``
``/config/brokers/<id>``, ``/config/brokers/<default>``  dynamic broker configs, per broker and cluster-wide
``/admin/delete_topics/<topic>``            a deletion the controller is to carry out
``/admin/preferred_replica_election``       leader elections asked for (ElectLeaders): ``{"version": 1,
                                            "election_type": 0 (preferred) or 1 (unclean), "partitions":
                                            [{"topic", "partition"}, ...]}``, removed once carried out
``/latest_producer_id_block``               ``{"version": 1, "broker", "block_start", "block_end"}``, changed
                                            conditionally on its version
==========================================  =========================================================================
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from rill.metadata.store import BrokerInfo

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
GROUP_CONFIGS = "/config/groups"
DEFAULT_BROKER = "<default>"
DELETE_TOPICS = "/admin/delete_topics"
LEADER_ELECTION = "/admin/preferred_replica_election"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# Persistent parents made at start (create is idempotent: "already there" is fine).
PARENTS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, BROKER_CONFIGS, DELETE_TOPICS, "/cluster")


def broker_path(node_id: int) -> str:
    return f"{BROKER_IDS}/{node_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def parse_state_path(path: str) -> tuple[str, int] | None:
    """The topic and partition of a partition state znode's path (``state_path``); None for any other path."""
    parts = path.split("/")
    if len(parts) != 7 or "/".join(parts[:3]) != TOPICS or parts[4] != "partitions" or parts[6] != "state":
        return None
    try:
        return parts[3], int(parts[5])
    except ValueError:
        return None


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def group_config_path(group_id: str) -> str:
    return f"{GROUP_CONFIGS}/{group_id}"


def broker_config_path(node_id: int | None) -> str:
    return f"{BROKER_CONFIGS}/{DEFAULT_BROKER if node_id is None else node_id}"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _loads(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


class MalformedZnode(ValueError):
    """A znode whose content is not what its decoder reads (not JSON, a field missing or of another type): written
    by another tool or another version. Its readers log it and skip it; none fails because of it."""


_Decoded = TypeVar("_Decoded")


def _decoder(decode: Callable[..., _Decoded]) -> Callable[..., _Decoded]:
    """``decode`` raising :class:`MalformedZnode` for whatever content it cannot read."""

    @functools.wraps(decode)
    def checked(*args: Any) -> _Decoded:
        try:
            return decode(*args)
        # ArithmeticError: a number JSON reads as infinity (1e999) made an int; RecursionError: nested too deep.
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, ArithmeticError, RecursionError) as e:
            raise MalformedZnode(f"{decode.__name__}: {type(e).__name__}: {e}") from None

    return checked


# -- payloads --------------------------------------------------------------------------------------------


def encode_broker(broker: BrokerInfo, *, shutting_down: bool = False) -> bytes:
    """A broker's registration; ``shutting_down`` marks a controlled shutdown (no longer live for leadership)."""
    endpoints = broker.endpoints or (("PLAINTEXT", broker.host, broker.port, "PLAINTEXT"),)
    return _dumps({
        "version": 5, "host": broker.host, "port": broker.port, "rack": broker.rack,
        "endpoints": [f"{name}://{host}:{port}" for name, host, port, _ in endpoints],
        "listener_security_protocol_map": {name: protocol for name, _, _, protocol in endpoints},
        "timestamp": str(int(time.time() * 1000)), "shutting_down": shutting_down,
    })  # fmt: skip


@_decoder
def decode_broker(node_id: int, data: bytes) -> BrokerInfo:
    d = _loads(data)
    protocols = d.get("listener_security_protocol_map") or {}
    endpoints = []
    for text in d.get("endpoints") or ():
        name, _, address = str(text).partition("://")
        host, _, port = address.rpartition(":")
        if name and port.isdigit():
            endpoints.append((name, host.strip("[]"), int(port), str(protocols.get(name, name))))
    return BrokerInfo(node_id, str(d["host"]), int(d["port"]), d.get("rack"), tuple(endpoints))


def encode_controller(node_id: int) -> bytes:
    return _dumps({"version": 1, "brokerid": node_id, "timestamp": str(int(time.time() * 1000))})


@_decoder
def decode_controller(data: bytes) -> int:
    return int(_loads(data)["brokerid"])


@dataclass(frozen=True, slots=True)
class Assignment:
    """A topic's id and the replicas of each partition (``/brokers/topics/<topic>``); during a reassignment a
    partition's replicas are the target ones followed by the others, and ``adding``/``removing`` name the
    replicas being added and removed (Kafka's KIP-455 layout)."""

    topic_id: uuid.UUID
    partitions: Mapping[int, tuple[int, ...]]
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def encode_assignment(a: Assignment) -> bytes:
    def lists(m: Mapping[int, tuple[int, ...]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(m.items()) if r}

    return _dumps({"version": 3, "topic_id": str(a.topic_id), "partitions": lists(a.partitions),
                   "adding_replicas": lists(a.adding), "removing_replicas": lists(a.removing)})  # fmt: skip


@_decoder
def decode_assignment(data: bytes) -> Assignment:
    d = _loads(data)

    def tuples(m: Mapping[str, list[int]] | None) -> dict[int, tuple[int, ...]]:
        return {int(p): tuple(int(b) for b in r) for p, r in (m or {}).items()}

    return Assignment(uuid.UUID(d["topic_id"]), tuples(d["partitions"]), tuples(d.get("adding_replicas")),
                      tuples(d.get("removing_replicas")))  # fmt: skip


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's state (``.../partitions/<p>/state``); ``partition_epoch`` is its znode version."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int = 0


def encode_state(s: LeaderAndIsr) -> bytes:
    return _dumps({"version": 1, "leader": s.leader, "leader_epoch": s.leader_epoch, "isr": list(s.isr),
                   "controller_epoch": s.controller_epoch})  # fmt: skip


@_decoder
def decode_state(data: bytes, version: int) -> LeaderAndIsr:
    d = _loads(data)
    return LeaderAndIsr(int(d["leader"]), int(d["leader_epoch"]), tuple(int(b) for b in d["isr"]),
                        int(d["controller_epoch"]), version)  # fmt: skip


def encode_configs(configs: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(configs)})


@_decoder
def decode_configs(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    return {str(k): str(v) for k, v in _loads(data).get("config", {}).items()}


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


@_decoder
def decode_cluster_id(data: bytes) -> str:
    return str(_loads(data)["id"])


def encode_election(election_type: int, partitions: list[tuple[str, int]]) -> bytes:
    return _dumps({"version": 1, "election_type": election_type,
                   "partitions": [{"topic": t, "partition": p} for t, p in partitions]})  # fmt: skip


@_decoder
def decode_election(data: bytes) -> tuple[int, list[tuple[str, int]]]:
    d = _loads(data)
    return int(d.get("election_type", 0)), [(str(e["topic"]), int(e["partition"])) for e in d["partitions"]]


def encode_producer_id_block(broker: int, start: int, end: int) -> bytes:
    return _dumps({"version": 1, "broker": broker, "block_start": start, "block_end": end})


@_decoder
def decode_producer_id_block(data: bytes) -> int:
    """The first producer id after the block (0 when none was handed out)."""
    if not data:
        return 0
    return int(_loads(data)["block_end"]) + 1
