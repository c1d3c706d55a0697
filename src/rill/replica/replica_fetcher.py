"""Followers fetch from their leaders: one fetcher task per source broker, as Kafka's ReplicaFetcherThread.

A partition this broker follows is given to the fetcher of its leader (``ReplicaFetcherManager.update``, after
every metadata change). Before its first fetch at a leader epoch the follower truncates its log to where it
agrees with the leader (KIP-101/279): it asks the leader, with OffsetForLeaderEpoch, where its own latest epoch
ends in the leader's log, and cuts its log there (never below its high watermark's reach on the leader: the
leader's answer is the truth), so a replica that led before and wrote records the cluster never committed
drops them and never diverges. A leader that never had that epoch answers with its largest epoch below it:
the follower then cuts at the smaller of the two ends of that epoch (the leader's and its own), and asks
again until the leader knows the epoch it asks about. Then it fetches from its log end offset as replica
``node.id`` (the leader counts that offset as this replica's position, which moves the high watermark),
appends what comes back as follower (offsets and leader epochs as the leader wrote them), and takes the
leader's high watermark (``on_progress`` is told of the partition when its records or high watermark moved, which
wakes the consumers a follower serves, KIP-392). Fetches go in an incremental fetch session (KIP-227,
``FetchSessionHandler``): after a full fetch, a request names only the partitions whose fetch offset or other
parameters changed (and forgets those no longer fetched), and the leader answers only the partitions with
something new; a partition left out of a response had nothing new and stays as it is.
A partition the leader refuses (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, a failed
OffsetForLeaderEpoch) is asked again only after ``replica.fetch.backoff.ms`` (Kafka's delayed partitions), the
others going on meanwhile; a fetcher whose leader is unreachable retries after it too. A fetch answered
OFFSET_OUT_OF_RANGE is Kafka's out-of-range case: a log that runs past the leader's end (asked with ListOffsets as
a replica) is cut there, one that ends below the leader's log start starts over at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from rill.cluster.network_client import NetworkClient
from rill.common import TopicPartition
from rill.errors import ErrorCode, KafkaError
from rill.log.log import Log
from rill.metadata.store import BrokerInfo
from rill.protocol import ApiKey
from rill.replica.fetch_session_handler import FetchSessionHandler
from rill.replica.partition import Partition
from rill.security.inter_broker import client_config

log = logging.getLogger(__name__)

LATEST_TIMESTAMP = -1


def truncation_target(plog: Log, asked_epoch: int, leader_epoch: int, leader_end: int) -> tuple[int, bool]:
    """Where a follower cuts ``plog`` after asking its leader (OffsetForLeaderEpoch) where ``asked_epoch`` ends,
    given the answer ``(leader_epoch, leader_end)``, and whether the log then agrees with the leader's (False:
    ask again, about the epoch the log now ends with)."""
    if leader_end < 0:
        # The leader knows no such epoch: what this replica knows committed stays, the rest is fetched again
        # (Kafka truncates to the high watermark then).
        return min(plog.high_watermark, plog.log_end_offset), True
    if plog.leader_epoch_cache.latest_epoch < 0 or leader_epoch == asked_epoch:
        return min(leader_end, plog.log_end_offset), True
    # The leader never had the epoch asked about; its answer ends its largest epoch below it. This log's records
    # past its own end of that epoch are of later epochs the leader lacks.
    own_epoch, own_end = plog.leader_epoch_cache.end_offset_for(leader_epoch, plog.log_end_offset)
    target = min(leader_end, own_end if own_end >= 0 else plog.log_end_offset, plog.log_end_offset)
    return target, own_epoch == leader_epoch


@dataclass(slots=True)
class _Fetching:
    partition: Partition
    leader_epoch: int
    truncated: bool = False  # the log agrees with the leader's at this epoch
    delayed_until: float = 0.0  # after an error: no request for it before this time (loop clock)


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader, in one loop."""

    def __init__(self, node_id: int, leader: int, client: NetworkClient, *, max_bytes: int, wait_ms: int,
                 backoff_ms: int, on_progress: Callable[[TopicPartition], None] | None = None) -> None:  # fmt: skip
        self.node_id = node_id
        self._on_progress = on_progress
        self.leader = leader
        self._client = client
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._backoff_s = backoff_ms / 1000.0
        self.partitions: dict[TopicPartition, _Fetching] = {}
        self._changed = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._session = FetchSessionHandler()
        self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{leader}")
        self.lag: dict[TopicPartition, int] = {}

    def add(self, partition: Partition) -> None:
        current = self.partitions.get(partition.tp)
        if current is None or current.leader_epoch != partition.leader_epoch or current.partition is not partition:
            self.partitions[partition.tp] = _Fetching(partition, partition.leader_epoch)
            self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is not None:
            self.lag.pop(tp, None)
            self._changed.set()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        while True:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                await self._truncate()
                await self._fetch()
            except asyncio.CancelledError:
                raise
            except KafkaError as e:
                log.debug("Fetch from broker %d failed: %s", self.leader, e.message)
                await asyncio.sleep(self._backoff_s)
            except Exception:
                log.exception("Replica fetcher for broker %d failed; retrying", self.leader)
                await asyncio.sleep(self._backoff_s)

    def _delay(self, f: _Fetching) -> None:
        """No request for ``f`` before ``replica.fetch.backoff.ms`` (Kafka's delayed partitions): a partition the
        leader refuses is asked again after a pause, not in a loop."""
        f.delayed_until = self._loop.time() + self._backoff_s

    async def _idle(self) -> None:
        """Nothing to send now: wait for the first delayed partition, or a change of the partitions."""
        now = self._loop.time()
        if any(not f.truncated and f.delayed_until <= now for f in self.partitions.values()):
            return  # an OffsetForLeaderEpoch to send
        wake = min((f.delayed_until for f in self.partitions.values()), default=now + self._backoff_s)
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), max(wake - now, 0.001))

    async def _truncate(self) -> None:
        """OffsetForLeaderEpoch for the partitions not yet truncated at their current epoch."""
        now = self._loop.time()
        pending = [f for f in self.partitions.values() if not f.truncated and f.delayed_until <= now]
        if not pending:
            return
        topics: dict[str, list[dict[str, int]]] = {}
        asked: dict[TopicPartition, int] = {}
        sent = {f.partition.tp: f for f in pending}
        for f in pending:
            latest = f.partition.log.leader_epoch_cache.latest_epoch
            asked[f.partition.tp] = latest if latest >= 0 else 0
            topics.setdefault(f.partition.tp.topic, []).append({
                "partition": f.partition.tp.partition, "current_leader_epoch": f.leader_epoch,
                "leader_epoch": asked[f.partition.tp],
            })  # fmt: skip
        body = {"replica_id": self.node_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}  # fmt: skip
        conn = await self._client.ready(self.leader)
        response = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, body)
        assert response is not None
        answered: set[TopicPartition] = set()
        for t in response.body["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["topic"], p["partition"])
                found = self.partitions.get(tp)
                if found is None or found is not sent.get(tp) or found.truncated:
                    continue  # (removed, or added again at another epoch meanwhile: not an answer for it)
                answered.add(tp)
                if p["error_code"]:
                    log.debug("OffsetForLeaderEpoch of %s from %d: %s", tp, self.leader,
                              ErrorCode(p["error_code"]).name)  # fmt: skip
                    self._delay(found)
                    continue
                plog = found.partition.log
                target, done = truncation_target(plog, asked[tp], p["leader_epoch"], p["end_offset"])
                if target < plog.log_end_offset:
                    log.info("Truncating %s from %d to %d (leader %d's end of epoch %d)", tp,
                             plog.log_end_offset, target, self.leader, p["leader_epoch"])  # fmt: skip
                plog.truncate_to(target)  # also drops epochs at or past the end when nothing else goes
                found.truncated = done
        for f in pending:
            if f.partition.tp not in answered and self.partitions.get(f.partition.tp) is f:
                self._delay(f)  # not in the answer: asked again after a pause

    async def _fetch(self) -> None:
        now = self._loop.time()
        ready = {f.partition.tp: f for f in self.partitions.values() if f.truncated and f.delayed_until <= now}
        if not ready:
            await self._idle()
            return
        sent = {tp: (f, f.partition.log.log_end_offset) for tp, f in ready.items()}
        params = {tp: (offset, f.partition.log_start_offset, f.leader_epoch, self._max_bytes)
                  for tp, (f, offset) in sent.items()}  # fmt: skip
        session = self._session
        named, forgotten = session.build(params)
        topics: dict[str, list[dict[str, int]]] = {}
        for tp in named:
            offset, start, epoch, max_bytes = params[tp]
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition, "current_leader_epoch": epoch, "fetch_offset": offset,
                "log_start_offset": start, "partition_max_bytes": max_bytes, "last_fetched_epoch": -1,
            })  # fmt: skip
        gone: dict[str, list[int]] = {}
        for tp in forgotten:
            gone.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "replica_id": self.node_id, "replica_state": {"replica_id": self.node_id, "replica_epoch": -1},
            "max_wait_ms": self._wait_ms, "min_bytes": 1, "max_bytes": 0x7FFFFFFF, "isolation_level": 0,
            "session_id": session.session_id, "session_epoch": session.epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in gone.items()], "rack_id": "",
        }  # fmt: skip
        try:
            conn = await self._client.ready(self.leader)
            response = await conn.request(ApiKey.FETCH, body, max_version=12,
                                          timeout_ms=self._wait_ms + 30_000)  # fmt: skip
        except BaseException:
            session.handle_error()
            raise
        assert response is not None
        if not session.handle_response(response.body.get("error_code", 0), response.body.get("session_id", 0)):
            log.debug("Fetch session with broker %d: %s; fetching in full next", self.leader,
                      ErrorCode(response.body["error_code"]).name)  # fmt: skip
            return
        out_of_range: list[tuple[_Fetching, int]] = []
        for t in response.body["responses"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["topic"], p["partition_index"])
                fetching, offset = sent.get(tp, (None, -1))
                # Only an answer to the fetch as it still stands: not one made at an epoch or an offset that the
                # metadata or a truncation has replaced meanwhile (Kafka checks the same). What the leader's
                # session now holds of that partition is not what this replica took: the next fetch is a full one.
                if fetching is None or self.partitions.get(tp) is not fetching:
                    session.handle_error()
                    continue
                if fetching.partition.log.log_end_offset != offset:
                    session.handle_error()
                    continue
                code = ErrorCode(int(p["error_code"]))
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    out_of_range.append((fetching, int(p["log_start_offset"])))
                elif code != ErrorCode.NO_ERROR:
                    log.debug("Fetch of %s from %d: %s", tp, self.leader, code.name)
                    self._delay(fetching)
                else:
                    self._apply(fetching, p)
        if out_of_range:
            await self._out_of_range(out_of_range)

    def _apply(self, f: _Fetching, p: Mapping[str, object]) -> None:
        tp = f.partition.tp
        plog = f.partition.log
        records = p.get("records")
        before = (plog.log_end_offset, plog.high_watermark)
        if isinstance(records, (bytes, bytearray, memoryview)) and len(records):
            plog.append_as_follower(records)
        hw = int(p["high_watermark"])  # type: ignore[call-overload]
        plog.high_watermark = min(hw, plog.log_end_offset)
        start = int(p["log_start_offset"])  # type: ignore[call-overload]
        if start > plog.log_start_offset:
            plog.maybe_increment_log_start_offset(min(start, plog.high_watermark))
        self.lag[tp] = max(0, hw - plog.log_end_offset)
        if self._on_progress is not None and (plog.log_end_offset, plog.high_watermark) != before:
            self._on_progress(tp)

    async def _out_of_range(self, fetched: list[tuple[_Fetching, int]]) -> None:
        """Kafka's handling of OFFSET_OUT_OF_RANGE as follower: a log that ends past the leader's (records an
        unclean election left this replica alone with) is cut at the leader's end; one that ends below the leader's
        log start starts over there. The leader's end is asked with ListOffsets LATEST as this replica."""
        topics: dict[str, list[dict[str, int]]] = {}
        for f, _ in fetched:
            topics.setdefault(f.partition.tp.topic, []).append(
                {"partition_index": f.partition.tp.partition, "current_leader_epoch": f.leader_epoch,
                 "timestamp": LATEST_TIMESTAMP})  # fmt: skip
        body = {"replica_id": self.node_id, "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}  # fmt: skip
        ends: dict[TopicPartition, int] = {}
        try:
            conn = await self._client.ready(self.leader)
            response = await conn.request(ApiKey.LIST_OFFSETS, body)
            assert response is not None
            for t in response.body["topics"]:
                for p in t["partitions"]:
                    if not p["error_code"]:
                        ends[TopicPartition(t["name"], p["partition_index"])] = int(p["offset"])
        except KafkaError as e:
            log.debug("ListOffsets from broker %d failed: %s", self.leader, e.message)
        for f, leader_start in fetched:
            tp, plog = f.partition.tp, f.partition.log
            if self.partitions.get(tp) is not f:
                continue
            end = ends.get(tp)
            if end is None:
                self._delay(f)
            elif end < plog.log_end_offset:
                log.warning("Truncating %s from %d to the leader's log end %d: it holds records leader %d lacks "
                            "(an unclean leader election)", tp, plog.log_end_offset, end, self.leader)  # fmt: skip
                plog.truncate_to(end)
            elif leader_start > plog.log_end_offset:  # the leader deleted what this replica lacks: start over there
                log.info("%s: starting again at the leader's log start %d", tp, leader_start)
                plog.truncate_fully_and_start_at(leader_start)
            else:
                self._delay(f)  # within the leader's log by now: fetched again after a pause


class ReplicaFetcherManager:
    """The fetchers of a broker, one per leader it follows partitions of."""

    def __init__(self, node_id: int, config: object,
                 on_progress: Callable[[TopicPartition], None] | None = None) -> None:  # fmt: skip
        get = config.get  # type: ignore[attr-defined]
        self.node_id = node_id
        self._on_progress = on_progress
        self._client = NetworkClient(client_config(f"broker-{node_id}-fetcher", config))
        self._max_bytes = int(get("replica.fetch.max.bytes"))
        self._wait_ms = int(get("replica.fetch.wait.max.ms"))
        self._backoff_ms = int(get("replica.fetch.backoff.ms"))
        self._fetchers: dict[int, ReplicaFetcher] = {}

    def update(self, partitions: Mapping[TopicPartition, Partition], brokers: list[BrokerInfo],
               only: Iterable[TopicPartition] | None = None) -> None:  # fmt: skip
        """Fetch each followed partition from its leader (and nothing else); with ``only``, look at those partitions
        alone (those a metadata change made, changed or removed), the others staying as they are."""
        for b in brokers:
            if b.node_id != self.node_id:
                self._client.set_node(b.node_id, b.host, b.port)
        looked_at = set(partitions) if only is None else set(only)
        wanted: dict[TopicPartition, int] = {}
        for tp in looked_at:
            partition = partitions.get(tp)
            if partition is None:
                continue
            leader = partition.state.leader
            if leader >= 0 and leader != self.node_id and self.node_id in partition.state.replicas:
                wanted[tp] = leader
                fetcher = self._fetchers.get(leader)
                if fetcher is None:
                    fetcher = self._fetchers[leader] = ReplicaFetcher(
                        self.node_id, leader, self._client, max_bytes=self._max_bytes, wait_ms=self._wait_ms,
                        backoff_ms=self._backoff_ms, on_progress=self._on_progress,
                    )  # fmt: skip
                fetcher.add(partition)
        for leader, fetcher in self._fetchers.items():
            for tp in [tp for tp in (fetcher.partitions if only is None else looked_at)
                       if tp in fetcher.partitions and wanted.get(tp) != leader]:  # fmt: skip
                fetcher.remove(tp)

    def max_lag(self) -> int:
        return max((lag for f in self._fetchers.values() for lag in f.lag.values()), default=0)

    async def shutdown(self) -> None:
        for fetcher in self._fetchers.values():
            await fetcher.stop()
        self._fetchers.clear()
        await self._client.close()
