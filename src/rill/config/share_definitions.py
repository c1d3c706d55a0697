"""The share groups' broker configs (KIP-932; Kafka's names, defaults and valid values). Defined into
``BROKER_CONFIGS`` beside the others."""

from __future__ import annotations

from rill.config.config_def import HIGH, INT, MEDIUM, SHORT, at_least, between
from rill.config.definitions import BROKER_CONFIGS

for _name, _default, _doc, _validator in [
    ("group.share.record.lock.duration.ms", 30000,
     "How long a share consumer holds the records it acquired before they go back to the group.",
     between(1000, 3600000)),
    ("group.share.delivery.count.limit", 5,
     "Deliveries of one record to a share group; a record released or expired after this many is archived.",
     between(2, 10)),
    ("group.share.partition.max.record.locks", 2000,
     "Records of one share partition in flight at once (between its start and end offsets).",
     between(100, 10000)),
    ("group.share.session.timeout.ms", 45000,
     "A share-group member that sends no heartbeat for this long is removed and its records released.",
     at_least(1)),
    ("group.share.heartbeat.interval.ms", 5000, "The heartbeat interval given to share-group members.", at_least(1)),
    ("group.share.max.size", 200, "Members of one share group at most.", between(1, 1000)),
]:  # fmt: skip
    BROKER_CONFIGS.define(_name, INT, _default, _doc, _validator, MEDIUM)

# The share coordinator and __share_group_state (Kafka's names and defaults; a single broker, with no cluster,
# takes the replication factor and min ISR as 1).
for _name, _type, _default, _doc, _validator in [
    ("share.coordinator.state.topic.num.partitions", INT, 50, "Partitions of __share_group_state.", at_least(1)),
    ("share.coordinator.state.topic.replication.factor", SHORT, 3,
     "Replication factor of __share_group_state (1 on a broker with no cluster).", at_least(1)),
    ("share.coordinator.state.topic.min.isr", SHORT, 2,
     "min.insync.replicas of __share_group_state (1 on a broker with no cluster).", at_least(1)),
    ("share.coordinator.state.topic.segment.bytes", INT, 104857600, "Segment size of __share_group_state.",
     at_least(1)),
    ("share.coordinator.snapshot.update.records.per.snapshot", INT, 500,
     "ShareUpdate records of one share partition between two ShareSnapshot records.", between(0, 500)),
    ("share.coordinator.write.timeout.ms", INT, 5000,
     "How long a write to __share_group_state may take to reach the ISR.", at_least(1)),
]:  # fmt: skip
    BROKER_CONFIGS.define(_name, _type, _default, _doc, _validator, HIGH)
