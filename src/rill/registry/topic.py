"""The ``_schemas`` topic as the registry's storage: created compacted if missing, read from its start
into ``RegistryState`` by a background thread, written with ``acks=all`` and read back before a
write is answered.

librdkafka (confluent-kafka) does the Kafka I/O in its own threads; records reach the state on the
event loop (``call_soon_threadsafe``), so the HTTP handlers read the state without locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from rill.client import KafkaClient
from rill.common import TopicPartition as CommonTopicPartition
from rill.errors import KafkaError
from rill.registry.errors import OPERATION_TIMEOUT, STORE_ERROR, RegistryError
from rill.registry.store import Record, RegistryState

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "_schemas"


def ensure_topic(bootstrap: str, topic: str, timeout_s: float) -> None:
    """Create ``topic`` (one partition, cleanup.policy=compact, RF min(3, brokers)) unless it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(timeout=timeout_s)
    if topic in metadata.topics and metadata.topics[topic].error is None:
        partitions = len(metadata.topics[topic].partitions)
        if partitions != 1:  # the order of the registry's records is the order of one partition
            raise RuntimeError(f"the registry's topic {topic} has {partitions} partitions; it needs exactly 1")
        return
    rf = max(1, min(3, len(metadata.brokers)))
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=rf, config={"cleanup.policy": "compact"})],
        request_timeout=timeout_s,
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as e:
        if e.args and getattr(e.args[0], "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
            return
        raise


class SchemaTopic:
    """Reads ``topic`` into ``state`` continuously and writes records to it."""

    def __init__(self, bootstrap: str, state: RegistryState, *, topic: str = DEFAULT_TOPIC, timeout_s: float = 30.0):
        self.bootstrap = bootstrap
        self.state = state
        self.topic = topic
        self.timeout_s = timeout_s
        self.position = 0  # next offset the reader will hand over
        self._tp = TopicPartition(topic, 0)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        # End offsets come from Rill's blocking client (ListOffsets, metadata refreshed and retried when the
        # partition's leader moves); one query at a time.
        self._offsets: KafkaClient | None = None
        self._offsets_lock = threading.Lock()
        self._producer: Any = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(ensure_topic, self.bootstrap, self.topic, self.timeout_s)
        self._consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "rill-registry-reader",  # never joined: the partition is assigned directly
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
            }
        )
        self._consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self._offsets = KafkaClient(self.bootstrap, client_id="rill-registry", timeout_s=self.timeout_s)
        self._producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0}
        )
        self._thread = threading.Thread(target=self._read, name="registry-reader", daemon=True)
        self._thread.start()
        await self.catch_up()

    async def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10.0)
        for handle in (self._consumer, self._offsets):
            if handle is not None:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(handle.close)
        if self._producer is not None:
            await asyncio.to_thread(self._producer.flush, 5.0)
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(RegistryError(STORE_ERROR, "The registry is shutting down"))
        self._waiters.clear()

    # -- reading -------------------------------------------------------------------------------------

    def _read(self) -> None:
        consumer, loop = self._consumer, self._loop
        assert consumer is not None and loop is not None
        while not self._stop.is_set():
            try:
                # poll returns at the first record; consume(timeout=0) then drains what is already fetched
                # (consume with a timeout would wait for all num_messages or the whole timeout).
                first = consumer.poll(0.2)
                msgs = [] if first is None else [first, *consumer.consume(num_messages=1000, timeout=0)]
                records: list[tuple[int, bytes | None, bytes | None]] = []
                for m in msgs:
                    if m.error() is not None:
                        log.warning("Reading %s: %s", self.topic, m.error())
                        continue
                    records.append((m.offset(), m.key(), m.value()))
                pos = consumer.position([self._tp])[0].offset
            except Exception as e:  # the thread must survive a broker outage
                log.warning("Reading %s failed: %s", self.topic, e)
                self._stop.wait(0.5)
                continue
            if records or pos > self.position:
                with contextlib.suppress(RuntimeError):  # the loop closed while stopping
                    loop.call_soon_threadsafe(self._deliver, records, pos)

    def _deliver(self, records: list[tuple[int, bytes | None, bytes | None]], pos: int) -> None:
        for offset, key, value in records:
            self.state.apply(offset, key, value)
        self.position = max(self.position, pos, self.state.next_offset)
        still: list[tuple[int, asyncio.Future[None]]] = []
        for target, fut in self._waiters:
            if fut.done():
                continue
            if self.position >= target:
                fut.set_result(None)
            else:
                still.append((target, fut))
        self._waiters = still

    async def wait_for(self, offset: int) -> None:
        """Until every record before ``offset`` is in the state (50002 after ``timeout_s``)."""
        if self.position >= offset:
            return
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._waiters.append((offset, fut))
        try:
            await asyncio.wait_for(fut, self.timeout_s)
        except TimeoutError:
            raise RegistryError(OPERATION_TIMEOUT, f"Timed out reading {self.topic} up to offset {offset}") from None

    async def end_offset(self) -> int:
        client = self._offsets
        assert client is not None
        tp = CommonTopicPartition(self.topic, 0)

        def query() -> int:
            with self._offsets_lock:
                return client.latest_offsets([tp])[tp]

        try:
            return await asyncio.to_thread(query)
        except KafkaError as e:
            raise RegistryError(STORE_ERROR, f"Cannot read the end of {self.topic}: {e}") from None

    async def catch_up(self) -> None:
        """Until the state holds every record written before this call."""
        await self.wait_for(await self.end_offset())

    # -- writing -------------------------------------------------------------------------------------

    async def write(self, records: Sequence[Record]) -> None:
        """Produce ``records`` in order (acks=all) and return once the state has applied them."""
        producer = self._producer
        offsets: list[int] = []
        errors: list[str] = []

        def produce() -> None:
            def delivered(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(str(err))
                else:
                    offsets.append(msg.offset())

            for key, value in records:
                producer.produce(self.topic, key=key, value=value, partition=0, on_delivery=delivered)
            remaining = producer.flush(self.timeout_s)
            if remaining:
                errors.append(f"{remaining} records not delivered in {self.timeout_s} s")

        await asyncio.to_thread(produce)
        if errors or len(offsets) != len(records):
            raise RegistryError(STORE_ERROR, f"Writing to {self.topic} failed: {'; '.join(errors) or 'no ack'}")
        await self.wait_for(max(offsets) + 1)
