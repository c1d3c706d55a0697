"""Leader election among registry instances sharing one ``_schemas`` topic.

Every instance joins the consumer group ``group`` subscribed to the topic, with its URL as the
client id. The group coordinator hands the topic's single partition to exactly one member: that
member is the leader and the only instance that writes (so global ids and versions are allocated
in one place); the others find it with DescribeGroups (the member whose assignment holds the
partition) and forward writes to it. The elected member pauses the partition: the group is used
for the election only, the records are read by ``SchemaTopic``.

A leader that dies is replaced after the group's session timeout; a leader cut off from the
coordinator keeps believing it leads until its own session times out (the window Confluent's
registry has too).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

DEFAULT_GROUP = "schema-registry"
CLIENT_ID_PREFIX = "rill-registry="


class LeaderElection:
    def __init__(
        self, bootstrap: str, topic: str, url: str, *, group: str = DEFAULT_GROUP, session_timeout_ms: int = 10000
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.url = url
        self.group = group
        self.session_timeout_ms = session_timeout_ms
        self.is_leader = False
        self.generation = 0  # counts assignments seen, for logs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._admin: Any = None

    def start(self) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": CLIENT_ID_PREFIX + self.url,
                "enable.auto.commit": False,
                "session.timeout.ms": self.session_timeout_ms,
                "heartbeat.interval.ms": max(100, self.session_timeout_ms // 10),
                "partition.assignment.strategy": "range",
            }
        )
        self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        self._thread = threading.Thread(target=self._run, name="registry-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self.is_leader = False
        if self._consumer is not None:
            try:
                self._consumer.close()  # leaves the group: another instance takes over at once
            except Exception as e:
                log.debug("Closing the election consumer: %s", e)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consumer.poll(0.2)  # serves rebalance callbacks; the partition is paused
            except Exception as e:
                log.warning("Registry election: %s", e)
                self._stop.wait(0.5)

    def _assigned(self, consumer: Any, partitions: list[Any]) -> None:
        self.generation += 1
        mine = any(p.topic == self.topic and p.partition == 0 for p in partitions)
        if partitions:
            consumer.pause(partitions)
        if mine != self.is_leader:
            log.info("Registry %s is %s", self.url, "now the leader" if mine else "a follower")
        self.is_leader = mine

    def _revoked(self, consumer: Any, partitions: list[Any]) -> None:
        if self.is_leader:
            log.info("Registry %s is no longer the leader", self.url)
        self.is_leader = False

    def leader_url(self, timeout_s: float = 5.0) -> str | None:
        """The URL of the member that holds the partition, or None while there is none (blocking)."""
        if self.is_leader:
            return self.url
        try:
            futures = self._admin.describe_consumer_groups([self.group], request_timeout=timeout_s)
            description = futures[self.group].result(timeout=timeout_s)
        except (KafkaException, TimeoutError, KeyError) as e:
            log.debug("Describing group %s: %s", self.group, e)
            return None
        for member in description.members:
            assignment = getattr(member, "assignment", None)
            tps = getattr(assignment, "topic_partitions", None) or []
            if any(tp.topic == self.topic and tp.partition == 0 for tp in tps):
                client_id = str(member.client_id)
                if client_id.startswith(CLIENT_ID_PREFIX):
                    return client_id[len(CLIENT_ID_PREFIX) :]
        return None
