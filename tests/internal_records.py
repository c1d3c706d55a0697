"""Hypothesis strategies for the records of the topics the broker and Rill's tools read back: what their writers
write, the same with any field values, cut short at any byte, and bytes of no layout at all. Shared by the unit
tests of each reader and the tests that start a broker, a registry or a mirror on such records."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from rill.common import TopicPartition
from rill.coordinator.group.group_metadata import OffsetAndMetadata
from rill.coordinator.group.group_metadata_manager import offset_commit_key, offset_commit_value
from rill.coordinator.transaction.transaction_log import encode_key, encode_value
from rill.coordinator.transaction.transaction_metadata import TransactionState, TxnTransitMetadata
from rill.protocol import encode_versioned

KeyValue = tuple[bytes | None, bytes | None]

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)
raw = st.binary(max_size=64)


@st.composite
def _cut(draw: st.DrawFn, whole: st.SearchStrategy[bytes]) -> bytes:
    """``whole``, cut short at any byte (or whole), or with bytes appended."""
    data = draw(whole)
    how = draw(st.sampled_from(["cut", "whole", "extra"]))
    if how == "cut":
        return data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    if how == "extra":
        return data + draw(st.binary(min_size=1, max_size=8))
    return data


def _versioned(
    name: str, versions: st.SearchStrategy[int], fields: st.SearchStrategy[dict]
) -> st.SearchStrategy[bytes]:
    return st.builds(lambda v, body: encode_versioned(name, v, body), versions, fields)


# -- __consumer_offsets -------------------------------------------------------------------------------------

_offset_keys = st.builds(lambda g, t, p: offset_commit_key(g, TopicPartition(t, p)), names, names, int32)
_group_keys = _versioned("GroupMetadataKey", st.just(2), st.fixed_dictionaries({"group": names}))
_offset_values = st.builds(
    lambda o, e, m, ts: offset_commit_value(OffsetAndMetadata(o, e, m, ts)), int64, int32, names, int64
)
_members = st.lists(
    st.fixed_dictionaries({
        "member_id": st.sampled_from(["m1", "m2", ""]) | names,
        "group_instance_id": st.none() | st.sampled_from(["i1", "i2"]),
        "client_id": names,
        "client_host": names,
        "rebalance_timeout": int32,
        "session_timeout": int32,
        "subscription": raw,
        "assignment": raw,
    }),
    max_size=4,
)  # fmt: skip
_group_values = _versioned(
    "GroupMetadataValue",
    st.integers(0, 4),
    st.fixed_dictionaries({
        "protocol_type": names,
        "generation": int32,
        "protocol": st.none() | names,
        "leader": st.none() | st.sampled_from(["m1", "m2"]) | names,
        "current_state_timestamp": int64,
        "members": _members,
    }),
)  # fmt: skip
_other_versions = st.builds(lambda v, rest: v.to_bytes(2, "big", signed=True) + rest, int16, raw)

offsets_keys = st.none() | _cut(_offset_keys | _group_keys | _other_versions) | raw
offsets_values = st.none() | _cut(_offset_values | _group_values | _other_versions) | raw
offsets_records: st.SearchStrategy[KeyValue] = st.tuples(offsets_keys, offsets_values)

# -- __transaction_state ------------------------------------------------------------------------------------

_partitions = st.frozensets(st.builds(TopicPartition, names, int32), max_size=4)
_transits = st.builds(
    TxnTransitMetadata,
    producer_id=int64,
    previous_producer_id=st.just(-1),
    producer_epoch=int16,
    last_producer_epoch=st.just(-1),
    txn_timeout_ms=int32,
    state=st.sampled_from(list(TransactionState)),
    partitions=_partitions,
    txn_start_ms=int64,
    txn_last_update_ms=int64,
)
_txn_values = st.builds(encode_value, _transits)
_txn_ids = st.sampled_from(["tx-a", "tx-b"]) | names

txn_keys = st.none() | _cut(st.builds(encode_key, _txn_ids) | _other_versions) | raw
txn_values = st.none() | _cut(_txn_values | _other_versions) | raw
txn_records: st.SearchStrategy[KeyValue] = st.tuples(txn_keys, txn_values)

# -- __share_group_state (ShareSnapshot and ShareUpdate, key versions 0 and 1) -------------------------------

_share_key_body = st.fixed_dictionaries({"group_id": st.sampled_from(["sg", "after-share"]) | names,
                                         "topic_id": st.uuids(), "partition": int32})  # fmt: skip
_share_keys = (_versioned("ShareSnapshotKey", st.just(0), _share_key_body)
               | _versioned("ShareUpdateKey", st.just(1), _share_key_body))  # fmt: skip
_state_batches = st.lists(st.fixed_dictionaries({"first_offset": int64, "last_offset": int64,
                                                 "delivery_state": st.integers(-128, 127),
                                                 "delivery_count": int16}), max_size=3)  # fmt: skip
_share_values = _versioned("ShareSnapshotValue", st.just(0), st.fixed_dictionaries({
    "snapshot_epoch": int32, "state_epoch": int32, "leader_epoch": int32, "start_offset": int64,
    "create_timestamp": int64, "write_timestamp": int64, "state_batches": _state_batches,
})) | _versioned("ShareUpdateValue", st.just(0), st.fixed_dictionaries({
    "snapshot_epoch": int32, "leader_epoch": int32, "start_offset": int64, "state_batches": _state_batches,
}))  # fmt: skip

share_state_keys = st.none() | _cut(_share_keys | _other_versions) | raw
share_state_values = st.none() | _cut(_share_values | _other_versions) | raw
share_state_records: st.SearchStrategy[KeyValue] = st.tuples(share_state_keys, share_state_values)

# -- _schemas (JSON keys and values of Confluent's layout) ----------------------------------------------------

_json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | names
_json = st.recursive(
    _json_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3), max_leaves=8
)
_schema_keys = st.fixed_dictionaries(
    {"keytype": st.sampled_from(["SCHEMA", "CONFIG", "MODE", "NOOP"]) | names, "magic": st.integers(0, 1)},
    optional={"subject": st.sampled_from(["s1", "s2"]) | _json, "version": st.integers(0, 3) | _json},
)
_schema_values = st.fixed_dictionaries(
    {},
    optional={
        "subject": names, "version": st.integers(1, 3) | _json, "id": st.integers(0, 3) | _json,
        "schemaType": st.just("AVRO") | _json, "schema": st.just('"string"') | _json,
        "references": st.just([]) | _json, "deleted": st.booleans() | _json,
        "compatibilityLevel": st.sampled_from(["FULL", "NONE", "bogus"]) | _json,
        "mode": st.sampled_from(["READWRITE", "READONLY", "bogus"]) | _json,
    },
)  # fmt: skip


def _json_bytes(values: st.SearchStrategy[object]) -> st.SearchStrategy[bytes]:
    return values.map(lambda v: json.dumps(v).encode())


schemas_keys = st.none() | _cut(_json_bytes(_schema_keys | _json)) | raw | st.just(b"[" * 5000)
schemas_values = st.none() | _cut(_json_bytes(_schema_values | _json)) | raw | st.just(b"1e999")
schemas_records: st.SearchStrategy[KeyValue] = st.tuples(schemas_keys, schemas_values)

# -- a mirror's offset syncs (key "<topic>:<partition>", value "<source> <target>") ----------------------------

_numbers = st.integers(-5, 2**64).map(str) | st.sampled_from(["", " ", "+1", "1_0", "٣", "0x1"])
sync_keys = st.none() | st.builds(lambda t, p: f"{t}:{p}".encode(), names, _numbers) | raw
sync_values = st.none() | st.builds(lambda s, t: f"{s} {t}".encode(), _numbers, _numbers) | raw
sync_records: st.SearchStrategy[KeyValue] = st.tuples(sync_keys, sync_values)
