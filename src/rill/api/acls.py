"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

The dispatcher has already checked the caller may DESCRIBE (DescribeAcls) or ALTER (the others) the cluster. With
no authorizer configured each answers SECURITY_DISABLED. Every binding and filter is validated first (an invalid
one is answered INVALID_REQUEST on its own); the valid creations, or the deletions of every valid filter, are then
written in one change of the metadata store, in effect on every broker.
"""

from __future__ import annotations

from typing import Any

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey
from rill.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    binding_problem,
)

_DISABLED = "No Authorizer is configured on the broker"


def _enum(kind: type[Any], value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def _filter(item: Body) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, item["resource_type_filter"]),
        item["resource_name_filter"],
        _enum(PatternType, item.get("pattern_type_filter", PatternType.LITERAL)),
        item["principal_filter"],
        item["host_filter"],
        _enum(AclOperation, item["operation"]),
        _enum(PermissionType, item["permission_type"]),
    )


def _binding_body(b: AclBinding) -> Body:
    return {"resource_type": b.pattern.resource_type, "resource_name": b.pattern.name,
            "pattern_type": b.pattern.pattern_type, "principal": b.entry.principal, "host": b.entry.host,
            "operation": b.entry.operation, "permission_type": b.entry.permission}  # fmt: skip


@handler(ApiKey.DESCRIBE_ACLS, 0, 3)
async def describe_acls(ctx: RequestContext, request: Body) -> Body:
    if ctx.services.authorizer is None:
        return {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED, "resources": []}
    flt = _filter(request)
    problem = flt.problem()
    if problem is not None:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": problem, "resources": []}
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in ctx.services.metadata.acls().bindings():
        if flt.matches(b):
            by_pattern.setdefault(b.pattern, []).append(b.entry)
    resources = [
        {"resource_type": p.resource_type, "resource_name": p.name, "pattern_type": p.pattern_type,
         "acls": [{"principal": e.principal, "host": e.host, "operation": e.operation,
                   "permission_type": e.permission} for e in sorted(entries, key=str)]}
        for p, entries in sorted(by_pattern.items(), key=lambda kv: (kv[0].resource_type, kv[0].name))
    ]  # fmt: skip
    return {"error_code": ErrorCode.NO_ERROR, "error_message": None, "resources": resources}


@handler(ApiKey.CREATE_ACLS, 0, 3)
async def create_acls(ctx: RequestContext, request: Body) -> Body:
    creations = request["creations"]
    if ctx.services.authorizer is None:
        return {"results": [{"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED}] * len(creations)}
    results: list[Body] = []
    valid: list[AclBinding] = []
    for c in creations:
        binding = AclBinding(
            ResourcePattern(_enum(ResourceType, c["resource_type"]), c["resource_name"],
                            _enum(PatternType, c.get("resource_pattern_type", PatternType.LITERAL))),
            AccessControlEntry(c["principal"], c["host"], _enum(AclOperation, c["operation"]),
                               _enum(PermissionType, c["permission_type"])),
        )  # fmt: skip
        problem = binding_problem(binding)
        if problem is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": problem})
        else:
            valid.append(binding)
            results.append({"error_code": ErrorCode.NO_ERROR, "error_message": None})
    if valid:
        store = ctx.services.metadata
        try:
            await store.alter_acls(store.acls().changed(valid, []))
        except KafkaError as e:
            for r in results:
                if r["error_code"] == ErrorCode.NO_ERROR:
                    r.update(error_code=e.code, error_message=e.message)
    return {"results": results}


@handler(ApiKey.DELETE_ACLS, 0, 3)
async def delete_acls(ctx: RequestContext, request: Body) -> Body:
    filters = request["filters"]
    if ctx.services.authorizer is None:
        disabled = {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _DISABLED, "matching_acls": []}
        return {"filter_results": [dict(disabled) for _ in filters]}
    store = ctx.services.metadata
    bindings = list(store.acls().bindings())
    results: list[Body] = []
    removed: dict[AclBinding, None] = {}
    for item in filters:
        flt = _filter(item)
        problem = flt.problem()
        if problem is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": problem, "matching_acls": []})
            continue
        matched = [b for b in bindings if flt.matches(b)]
        removed.update(dict.fromkeys(matched))
        results.append({
            "error_code": ErrorCode.NO_ERROR, "error_message": None,
            "matching_acls": [{"error_code": ErrorCode.NO_ERROR, "error_message": None, **_binding_body(b)}
                              for b in matched],
        })  # fmt: skip
    if removed:
        try:
            await store.alter_acls(store.acls().changed([], removed))
        except KafkaError as e:
            for r in results:
                if r["error_code"] == ErrorCode.NO_ERROR:
                    r.update(error_code=e.code, error_message=e.message, matching_acls=[])
    return {"filter_results": results}
