"""The AuthorizedOperations fields of Metadata, DescribeCluster and DescribeGroups.

A client that asks for them gets, for each resource, a bit field of the ACL operations it may perform
there: bit ``n`` set for the operation whose AclOperation code is ``n``. Without an authorizer (Rill has
none yet) Kafka answers every operation the resource type supports; a client that does not ask gets
INT32_MIN, "omitted".
"""

from __future__ import annotations

from enum import IntEnum

OMITTED = -(2**31)


class AclOperation(IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


_op = AclOperation
SUPPORTED: dict[str, tuple[AclOperation, ...]] = {
    "topic": (_op.READ, _op.WRITE, _op.CREATE, _op.DESCRIBE, _op.DELETE, _op.ALTER, _op.DESCRIBE_CONFIGS,
              _op.ALTER_CONFIGS),
    "group": (_op.READ, _op.DESCRIBE, _op.DELETE),
    "cluster": (_op.CREATE, _op.CLUSTER_ACTION, _op.DESCRIBE_CONFIGS, _op.ALTER_CONFIGS, _op.IDEMPOTENT_WRITE,
                _op.ALTER, _op.DESCRIBE),
}
"""The operations each resource type supports (Kafka's ``AclEntry.supportedOperations``)."""


def authorized_operations(resource_type: str, requested: bool) -> int:
    """The field for one resource of ``resource_type`` ("topic", "group" or "cluster")."""
    if not requested:
        return OMITTED
    bits = 0
    for operation in SUPPORTED[resource_type]:
        bits |= 1 << operation
    return bits
