"""The share groups' broker configs (KIP-932; Kafka's names, defaults and valid values). Defined into
``BROKER_CONFIGS`` beside the others."""

from __future__ import annotations

from rill.config.config_def import INT, MEDIUM, at_least, between
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
