"""How a share-partition leader keeps its state durable (Kafka's Persister): ``Persister`` is the interface,
``DefaultStatePersister`` the one the broker uses, which finds the share coordinator of each share partition
(the leader of its ``__share_group_state`` partition) and asks it with ReadShareGroupState,
WriteShareGroupState, DeleteShareGroupState, InitializeShareGroupState and ReadShareGroupStateSummary: the
local coordinator directly, another broker's over the inter-broker listener.

A request the coordinator cannot serve now (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, a broker that does not answer) is sent again, to the coordinator the metadata names
then, with a growing backoff, until ``timeout_ms`` has passed; its last error is the answer. A write is answered
NO_ERROR only once the coordinator has it committed to ``__share_group_state``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from rill.cluster.network_client import NetworkClient
from rill.coordinator.share.share_coordinator import ShareCoordinator
from rill.coordinator.share.share_coordinator_shard import (
    DEFAULT_STATE_EPOCH,
    UNINITIALIZED_START_OFFSET,
    PersistedBatch,
    SharePartitionKey,
    WriteRequest,
)
from rill.coordinator.share.share_partition import RecordState, StateBatch
from rill.errors import ErrorCode, KafkaError
from rill.metadata.store import SHARE_GROUP_STATE_TOPIC
from rill.protocol import ApiKey

log = logging.getLogger(__name__)

PartitionKey = tuple[uuid.UUID, int]  # (topic id, partition)

RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
                       ErrorCode.REQUEST_TIMED_OUT})  # fmt: skip


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A share partition's persisted state: ``start_offset`` -1 when it was never initialized."""

    state_epoch: int = DEFAULT_STATE_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    batches: tuple[StateBatch, ...] = ()


class Persister(Protocol):
    async def read(self, group_id: str, key: PartitionKey, leader_epoch: int = -1) -> tuple[ErrorCode, PartitionState]:
        """The state of a share partition; a leader passes its leader epoch (a stale one is FENCED_LEADER_EPOCH)."""
        ...

    async def write(self, group_id: str, key: PartitionKey, state: PartitionState, leader_epoch: int = -1) -> ErrorCode:
        """Replace the state of a share partition; NO_ERROR once it is durable."""
        ...

    async def delete(self, group_id: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        ...

    async def initialize(self, group_id: str, key: PartitionKey, start_offset: int, state_epoch: int) -> ErrorCode:
        """Start a share partition afresh at ``start_offset`` with ``state_epoch`` (a newer one fences the
        writes of leaders that read an older state)."""
        ...

    async def read_summary(self, group_id: str, key: PartitionKey) -> tuple[ErrorCode, PartitionState]:
        """The state epoch and start offset (no batches)."""
        ...


def to_state_batches(batches: Iterable[PersistedBatch]) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                 for b in batches)  # fmt: skip


def to_persisted(batches: Iterable[StateBatch]) -> tuple[PersistedBatch, ...]:
    return tuple(PersistedBatch(b.first_offset, b.last_offset, int(b.state), b.delivery_count) for b in batches)


def _wire_batches(batches: Iterable[StateBatch]) -> list[dict[str, int]]:
    return [{"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": int(b.state),
             "delivery_count": b.delivery_count} for b in batches]  # fmt: skip


class DefaultStatePersister:
    def __init__(
        self,
        node_id: int,
        coordinator: ShareCoordinator,
        client: Callable[[], NetworkClient],
        *,
        timeout_ms: int = 30000,
        backoff_ms: int = 100,
        backoff_max_ms: int = 1000,
    ) -> None:
        self.node_id = node_id
        self.coordinator = coordinator
        self._client = client
        self.timeout_ms = timeout_ms
        self.backoff_ms = backoff_ms
        self.backoff_max_ms = backoff_max_ms

    # -- the interface -------------------------------------------------------------------------------------

    async def read(self, group_id: str, key: PartitionKey, leader_epoch: int = -1) -> tuple[ErrorCode, PartitionState]:
        spk = SharePartitionKey(group_id, *key)
        partition = {"partition": key[1], "leader_epoch": leader_epoch}
        result = await self._call(spk, ApiKey.READ_SHARE_GROUP_STATE, partition,
                                  lambda: self._local_read(spk, leader_epoch))  # fmt: skip
        return ErrorCode(result["error_code"]), _state_of(result)

    async def write(self, group_id: str, key: PartitionKey, state: PartitionState, leader_epoch: int = -1) -> ErrorCode:
        spk = SharePartitionKey(group_id, *key)
        w = WriteRequest(state.state_epoch, leader_epoch, state.start_offset, to_persisted(state.batches))
        partition = {"partition": key[1], "state_epoch": state.state_epoch, "leader_epoch": leader_epoch,
                     "start_offset": state.start_offset, "state_batches": _wire_batches(state.batches)}  # fmt: skip
        result = await self._call(spk, ApiKey.WRITE_SHARE_GROUP_STATE, partition,
                                  lambda: self._local_code(self.coordinator.write(spk, w)))  # fmt: skip
        return ErrorCode(result["error_code"])

    async def delete(self, group_id: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        async def one(key: PartitionKey) -> ErrorCode:
            spk = SharePartitionKey(group_id, *key)
            result = await self._call(spk, ApiKey.DELETE_SHARE_GROUP_STATE, {"partition": key[1]},
                                      lambda: self._local_code(self.coordinator.delete(spk)))  # fmt: skip
            return ErrorCode(result["error_code"])

        wanted = list(dict.fromkeys(keys))
        codes = await asyncio.gather(*(one(k) for k in wanted))
        return dict(zip(wanted, codes, strict=True))

    async def initialize(self, group_id: str, key: PartitionKey, start_offset: int, state_epoch: int) -> ErrorCode:
        spk = SharePartitionKey(group_id, *key)
        partition = {"partition": key[1], "state_epoch": state_epoch, "start_offset": start_offset}
        result = await self._call(spk, ApiKey.INITIALIZE_SHARE_GROUP_STATE, partition,
                                  lambda: self._local_code(self.coordinator.initialize(spk, state_epoch,
                                                                                       start_offset)))  # fmt: skip
        return ErrorCode(result["error_code"])

    async def read_summary(self, group_id: str, key: PartitionKey) -> tuple[ErrorCode, PartitionState]:
        spk = SharePartitionKey(group_id, *key)
        result = await self._call(spk, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, {"partition": key[1], "leader_epoch": -1},
                                  lambda: self._local_read(spk, -1))  # fmt: skip
        return ErrorCode(result["error_code"]), _state_of({**result, "state_batches": []})

    # -- finding the coordinator and asking it ---------------------------------------------------------------

    async def _local_read(self, spk: SharePartitionKey, leader_epoch: int) -> dict[str, Any]:
        code, state = await self.coordinator.read(spk, leader_epoch)
        if state is None:
            return {"error_code": code}
        return {"error_code": code, "state_epoch": state.state_epoch, "start_offset": state.start_offset,
                "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                   "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
                                  for b in state.batches]}  # fmt: skip

    @staticmethod
    async def _local_code(call: Awaitable[ErrorCode]) -> dict[str, Any]:
        return {"error_code": await call}

    async def _call(
        self,
        spk: SharePartitionKey,
        api_key: int,
        partition: dict[str, Any],
        local: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        attempts = 0
        while True:
            result = await self._attempt(spk, api_key, partition, local)
            code = ErrorCode(result.get("error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
            if code not in RETRIABLE or loop.time() >= deadline:
                if code in RETRIABLE:
                    log.warning("share state of %s: %s gave up after %d attempts: %s", spk, ApiKey(api_key).name,
                                attempts + 1, code.name)  # fmt: skip
                return result
            attempts += 1
            backoff = min(self.backoff_ms * (2 ** min(attempts - 1, 10)), self.backoff_max_ms) / 1000
            await asyncio.sleep(min(backoff, max(deadline - loop.time(), 0)))

    async def _attempt(
        self,
        spk: SharePartitionKey,
        api_key: int,
        partition: dict[str, Any],
        local: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        coordinator = self.coordinator
        if coordinator.metadata.topic(SHARE_GROUP_STATE_TOPIC) is None:
            try:
                await coordinator.maybe_create_topic()
            except KafkaError as e:
                return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "error_message": e.message}
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}  # created: its leaders are being elected
        leader = coordinator.leader_of(coordinator.partition_for(spk))
        if leader < 0:
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        if leader == self.node_id:
            return await local()
        body = {"group_id": spk.group_id, "topics": [{"topic_id": spk.topic_id, "partitions": [partition]}]}
        try:
            response = await self._client().request(leader, api_key, body)
        except (TimeoutError, KafkaError, OSError) as e:
            log.debug("%s to broker %d failed: %s", ApiKey(api_key).name, leader, e)
            return {"error_code": ErrorCode.NETWORK_EXCEPTION}
        if response is None:
            return {"error_code": ErrorCode.NETWORK_EXCEPTION}
        for result in response.body.get("results", []):
            for p in result.get("partitions", []):
                if result.get("topic_id") == spk.topic_id and p.get("partition") == spk.partition:
                    return dict(p)
        return {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR}


def _state_of(result: dict[str, Any]) -> PartitionState:
    if result.get("error_code", 0):
        return PartitionState()
    batches = tuple(PersistedBatch(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
                    for b in result.get("state_batches") or [])  # fmt: skip
    try:
        converted = to_state_batches(batches)
    except ValueError:  # a delivery state this broker does not know: the batch is left out
        converted = tuple(StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                          for b in batches if b.delivery_state in (0, 2, 4))  # fmt: skip
    return PartitionState(result.get("state_epoch", DEFAULT_STATE_EPOCH),
                          result.get("start_offset", UNINITIALIZED_START_OFFSET), converted)  # fmt: skip
