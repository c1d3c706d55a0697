"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546, with Kafka's ZooKeeper-mode semantics.

AlterClientQuotas: each entry names an entity (``user`` and/or ``client-id``, a null name for the default) and
the quota keys to set or remove. Every entry is checked first (entity types, names, keys, values: INVALID_REQUEST
with Kafka's messages); the entries that pass are then written in one change of the metadata store, in effect on
every broker at once; a refused entry changes nothing. ``validate_only`` checks and writes nothing.

DescribeClientQuotas: filter components per entity type, matching an exact name, the default, or any name;
``strict`` leaves out entities that have a type no component names. Only entities with quotas are listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode, KafkaError
from rill.metadata.client_quotas import (
    CLIENT_ID,
    DEFAULT,
    QUOTA_KEYS,
    USER,
    QuotaEntity,
    check_quota_value,
    entity_from_components,
    sanitize,
)
from rill.protocol import ApiKey

MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
IP = "ip"

_ANY = object()


@handler(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def handle_alter_client_quotas(ctx: RequestContext, request: Body) -> Body:
    results: list[Body] = []
    changes: dict[QuotaEntity, dict[str, float | None]] = {}
    writing: list[Body] = []
    for entry in request["entries"]:
        result: Body = {"error_code": 0, "error_message": None, "entity": entry["entity"]}
        results.append(result)
        try:
            entity = entity_from_components(entry["entity"])
            if entity in changes:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate client quota entity {entity.path}")
            ops: dict[str, float | None] = {}
            for op in entry["ops"]:
                key = op["key"]
                if op["remove"]:
                    if key not in QUOTA_KEYS:
                        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid configuration key {key}")
                    ops[key] = None
                else:
                    ops[key] = check_quota_value(key, float(op["value"]))
        except KafkaError as e:
            result.update(error_code=e.code, error_message=e.message)
            continue
        changes[entity] = ops
        writing.append(result)
    if changes and not request.get("validate_only", False):
        try:
            await ctx.services.metadata.alter_client_quotas(changes)
        except KafkaError as e:
            for result in writing:
                result.update(error_code=e.code, error_message=e.message)
    return {"throttle_time_ms": 0, "entries": results}


@handler(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
async def handle_describe_client_quotas(ctx: RequestContext, request: Body) -> Body:
    try:
        entries = describe(ctx.services.metadata.client_quotas(), request["components"], request["strict"])
    except KafkaError as e:
        return {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message, "entries": None}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}


def _wanted(component: Mapping[str, Any]) -> object:
    """What a component matches: a sanitized name, DEFAULT, or _ANY."""
    kind, match = component["match_type"], component["match"]
    if kind == MATCH_EXACT:
        if match is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"An exact match of {component['entity_type']} needs a name")
        return sanitize(match)
    if kind == MATCH_DEFAULT:
        return DEFAULT
    if kind == MATCH_ANY:
        return _ANY
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected match type: {kind}")


def describe(quotas: Any, components: list[Mapping[str, Any]], strict: bool) -> list[Body]:
    """The entries a DescribeClientQuotas filter selects (Kafka's checks of the filter raise INVALID_REQUEST,
    or UNSUPPORTED_VERSION for an entity type it does not know)."""
    wanted: dict[str, object] = {}
    for c in components:
        kind = c["entity_type"]
        if kind not in (USER, CLIENT_ID, IP):
            if not kind:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{kind}' not supported")
        if kind in wanted:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate {kind} filter component entity type")
        wanted[kind] = _wanted(c)
    if IP in wanted:
        if USER in wanted or CLIENT_ID in wanted:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                "Invalid entity filter component combination, IP filter component should not be used with user or "
                "clientId filter component.",
            )
        return []  # no IP quotas are kept

    def matches(kind: str, name: str | None) -> bool:
        want = wanted.get(kind)
        if want is None:
            return name is None or not strict
        if want is _ANY:
            return name is not None
        return name == want

    out: list[Body] = []
    for entity, values in quotas:
        if matches(USER, entity.user) and matches(CLIENT_ID, entity.client_id):
            out.append(
                {
                    "entity": entity.components(),
                    "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())],
                }
            )
    return out
