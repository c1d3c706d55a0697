"""Authorization of requests: the one place handlers ask whether the caller may do something.

With no authorizer configured (``authorizer.class.name`` empty) everything is allowed. Otherwise each question
goes to :class:`rill.security.authorizer.AclAuthorizer` with the connection's principal and client host.
:data:`CLUSTER_CHECKS` lists the APIs whose whole request needs one operation on the cluster; the dispatcher
refuses those before their handler runs. Handlers check the rest per resource (topics, groups, transactional ids)
before they change anything.

The AuthorizedOperations fields of Metadata, DescribeCluster and DescribeGroups: a client that asks for them gets,
for each resource, a bit field of the ACL operations it may perform there (bit ``n`` for the operation whose
AclOperation code is ``n``); a client that does not ask gets INT32_MIN, "omitted".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType

if TYPE_CHECKING:
    from rill.api.context import RequestContext

OMITTED = -(2**31)
_TYPES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.CLUSTER}

__all__ = ["CLUSTER_CHECKS", "AclOperation", "ResourceType", "authorize", "authorize_any", "authorize_cluster",
           "authorized_operations", "cluster_refusal", "filter_authorized"]  # fmt: skip

CLUSTER_CHECKS: dict[int, AclOperation] = {
    ApiKey.DESCRIBE_LOG_DIRS: AclOperation.DESCRIBE,
    ApiKey.ALTER_REPLICA_LOG_DIRS: AclOperation.ALTER,
    ApiKey.ELECT_LEADERS: AclOperation.ALTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: AclOperation.ALTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: AclOperation.DESCRIBE,
    ApiKey.WRITE_TXN_MARKERS: AclOperation.CLUSTER_ACTION,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: AclOperation.DESCRIBE,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: AclOperation.ALTER,
    ApiKey.DESCRIBE_ACLS: AclOperation.DESCRIBE,
    ApiKey.CREATE_ACLS: AclOperation.ALTER,
    ApiKey.DELETE_ACLS: AclOperation.ALTER,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: AclOperation.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CLIENT_QUOTAS: AclOperation.ALTER_CONFIGS,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: AclOperation.CLUSTER_ACTION,
    ApiKey.READ_SHARE_GROUP_STATE: AclOperation.CLUSTER_ACTION,
    ApiKey.WRITE_SHARE_GROUP_STATE: AclOperation.CLUSTER_ACTION,
    ApiKey.DELETE_SHARE_GROUP_STATE: AclOperation.CLUSTER_ACTION,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: AclOperation.CLUSTER_ACTION,
    ApiKey.LIST_CONFIG_RESOURCES: AclOperation.DESCRIBE_CONFIGS,
}
"""APIs refused as a whole (CLUSTER_AUTHORIZATION_FAILED) unless the caller may do the operation on the cluster."""

SHARE_STATE_APIS = frozenset({ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
                              ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DELETE_SHARE_GROUP_STATE,
                              ApiKey.READ_SHARE_GROUP_STATE_SUMMARY})  # fmt: skip


def authorize(
    ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, name: str, log_denied: bool = True
) -> bool:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    allowed: bool = authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, name, log_denied)
    return allowed


def authorize_cluster(ctx: RequestContext, operation: AclOperation, log_denied: bool = True) -> bool:
    return authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied)


def authorize_any(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Whether the caller may do ``operation`` on some resource of ``resource_type``."""
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    allowed: bool = authorizer.authorize_any(ctx.principal, ctx.client_host, operation, resource_type)
    return allowed


def filter_authorized(
    ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` the caller may do ``operation`` on (each asked once)."""
    return {n for n in set(names) if authorize(ctx, operation, resource_type, n, log_denied=False)}


def authorized_operations(
    resource_type: str, requested: bool, ctx: RequestContext | None = None, name: str | None = None
) -> int:
    """The field for one resource of ``resource_type`` ("topic", "group" or "cluster") named ``name``."""
    if not requested:
        return OMITTED
    rtype = _TYPES[resource_type]
    if name is None:
        name = CLUSTER_NAME
    bits = 0
    for operation in SUPPORTED_OPERATIONS[rtype]:
        if ctx is None or authorize(ctx, operation, rtype, name, log_denied=False):
            bits |= 1 << operation
    return bits


def cluster_refusal(api_key: int, request: dict[str, Any]) -> dict[str, Any]:
    """The response Kafka gives a caller refused one of :data:`CLUSTER_CHECKS`: CLUSTER_AUTHORIZATION_FAILED at
    the top and on every item the request named."""
    code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    body: dict[str, Any] = {"error_code": code, "error_message": message}
    if api_key == ApiKey.ELECT_LEADERS:
        body["replica_election_results"] = [
            {"topic": t["topic"], "partition_result": [
                {"partition_id": p, "error_code": code, "error_message": message} for p in t["partitions"]]}
            for t in request.get("topic_partitions") or []
        ]  # fmt: skip
    elif api_key == ApiKey.ALTER_REPLICA_LOG_DIRS:
        parts: dict[str, dict[int, None]] = {}
        for d in request.get("dirs") or []:
            for t in d["topics"]:
                parts.setdefault(t["name"], {}).update(dict.fromkeys(t["partitions"]))
        body["results"] = [{"topic_name": name, "partitions": [{"partition_index": p, "error_code": code} for p in ps]}
                           for name, ps in parts.items()]  # fmt: skip
    elif api_key == ApiKey.WRITE_TXN_MARKERS:
        body["markers"] = [
            {"producer_id": m["producer_id"], "topics": [
                {"name": t["name"], "partitions": [
                    {"partition_index": p, "error_code": code} for p in t["partition_indexes"]]}
                for t in m["topics"]]}
            for m in request["markers"]
        ]  # fmt: skip
    elif api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        users = dict.fromkeys(x["name"] for x in [*request["deletions"], *request["upsertions"]])
        body["results"] = [{"user": u, "error_code": code, "error_message": message} for u in users]
    elif api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        body["entries"] = [{"error_code": code, "error_message": message, "entity": e["entity"]}
                           for e in request["entries"]]  # fmt: skip
    elif api_key == ApiKey.CREATE_ACLS:
        body["results"] = [{"error_code": code, "error_message": message} for _ in request["creations"]]
    elif api_key in SHARE_STATE_APIS:
        body["results"] = [
            {"topic_id": t["topic_id"], "partitions": [
                {"partition": p["partition"], "error_code": code, "error_message": message} for p in t["partitions"]]}
            for t in request.get("topics") or []
        ]  # fmt: skip
    elif api_key == ApiKey.DELETE_ACLS:
        body["filter_results"] = [{"error_code": code, "error_message": message, "matching_acls": []}
                                  for _ in request["filters"]]  # fmt: skip
    return body
