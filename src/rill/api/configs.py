"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) for topics, brokers, broker loggers,
groups (``rill.api._group_configs``) and client metrics subscriptions (``rill.api._client_metrics_configs``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from rill.api._authorized import AclOperation, ResourceType, authorize, authorize_cluster
from rill.api._client_metrics_configs import (
    apply_client_metrics_configs,
    client_metrics_entries,
    current_client_metrics,
)
from rill.api._group_configs import GROUP, apply_group_configs, group_entries
from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.common import repeated
from rill.config import (
    ConfigEntry,
    ConfigSource,
    ConfigType,
    describe_broker_configs,
    describe_topic_configs,
    validate_broker_dynamic_configs,
    validate_topic_configs,
)
from rill.config.broker_config import PER_IP_ZERO_PROBLEM, effective_broker_value, per_ip_overrides
from rill.config.logger_levels import apply_change, check_change, current_levels
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey
from rill.telemetry.subscriptions import CLIENT_METRICS

log = logging.getLogger(__name__)

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _check_broker_name(ctx: RequestContext, name: str, *, default_allowed: bool = True) -> None:
    """``name`` is this broker's id, or ``""`` (the cluster-wide default) where ``default_allowed``."""
    if name != str(ctx.services.node_id) and not (default_allowed and name == ""):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, f"unknown broker {name!r}; this broker is {ctx.services.node_id}"
        )


def _entries(ctx: RequestContext, rtype: int, name: str, only: set[str] | None = None) -> list[ConfigEntry]:
    services = ctx.services
    store = services.metadata
    if rtype == TOPIC:
        topic = store.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        return describe_topic_configs(
            services.config, topic.configs, store.broker_configs(), store.default_broker_configs(), only
        )
    if rtype == BROKER:
        _check_broker_name(ctx, name)
        defaults = store.default_broker_configs()
        if name == "":
            # The cluster-wide default resource holds only the dynamic defaults that are set, as in Kafka.
            entries = describe_broker_configs(services.config, {}, defaults)
            return [e for e in entries if e.name in defaults]
        return describe_broker_configs(services.config, store.broker_configs(), defaults)
    if rtype == BROKER_LOGGER:
        _check_broker_name(ctx, name, default_allowed=False)
        source, string = ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, ConfigType.STRING
        return [ConfigEntry(n, level, source, False, False, string, (), "") for n, level in current_levels().items()]
    if rtype == GROUP:
        return group_entries(ctx, name)
    if rtype == CLIENT_METRICS:
        return client_metrics_entries(ctx, name)
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not supported")


def _alter_logger_levels(ctx: RequestContext, name: str, configs: list[Body], validate_only: bool) -> None:
    """IncrementalAlterConfigs on BROKER_LOGGER: every change is checked before any is made."""
    _check_broker_name(ctx, name, default_allowed=False)
    changes: list[tuple[str, str | None]] = []
    for c in configs:
        key, op, value = c["name"], c["config_operation"], c["value"]
        if op == SET:
            if value is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"null value for {key}")
            changes.append((key, value))
        elif op == DELETE:
            changes.append((key, None))
        else:
            what = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}.get(op, str(op))
            problem = f"{what} operation is not allowed for the BROKER_LOGGER resource"
            raise KafkaError(ErrorCode.INVALID_REQUEST, problem)
        check_change(*changes[-1])
    if not validate_only:
        for key, level in changes:
            apply_change(key, level)
        log.info("Logger levels changed by %s: %s", ctx.client, dict(changes))


def _check_access(ctx: RequestContext, rtype: int, name: str, operation: AclOperation) -> None:
    """A topic's configs need ``operation`` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on it, a broker's on the cluster."""
    if rtype == TOPIC:
        if not authorize(ctx, operation, ResourceType.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    elif rtype in (BROKER, BROKER_LOGGER, CLIENT_METRICS) and not authorize_cluster(ctx, operation):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    elif rtype == GROUP and not authorize(ctx, operation, ResourceType.GROUP, name):
        raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")


@handler(ApiKey.DESCRIBE_CONFIGS, 0, 4)
async def handle_describe_configs(ctx: RequestContext, request: Body) -> Body:
    include_synonyms = request.get("include_synonyms", False)
    include_docs = request.get("include_documentation", False)
    results: list[Body] = []
    for r in request["resources"]:
        rtype, name = r["resource_type"], r["resource_name"]
        out: Body = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": name}
        try:
            _check_access(ctx, rtype, name, AclOperation.DESCRIBE_CONFIGS)
            keys = r.get("configuration_keys")
            wanted = set(keys) if keys else None
            configs: list[Body] = []
            for e in _entries(ctx, rtype, name, wanted):
                if wanted is not None and e.name not in wanted:
                    continue
                configs.append(
                    {
                        "name": e.name,
                        "value": None if e.is_sensitive else e.value,
                        "read_only": e.read_only,
                        "is_default": e.source == 5,
                        "config_source": e.source,
                        "is_sensitive": e.is_sensitive,
                        "synonyms": [
                            {"name": s.name, "value": s.value, "source": s.source} for s in e.synonyms
                        ]
                        if include_synonyms
                        else [],
                        "config_type": e.config_type,
                        "documentation": e.documentation if include_docs else None,
                    }
                )
            out["configs"] = configs
        except KafkaError as e:
            out.update(error_code=e.code, error_message=e.message, configs=[])
        results.append(out)
    return {"throttle_time_ms": 0, "results": results}


async def _apply(ctx: RequestContext, rtype: int, name: str, new: Mapping[str, str], validate_only: bool) -> None:
    services = ctx.services
    if rtype == TOPIC:
        if services.metadata.topic(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        validate_topic_configs(dict(new))
        if not validate_only:
            await services.metadata.set_topic_configs(name, new)
            log.info("Topic %s configs set to %s by %s", name, dict(new), ctx.client)
    elif rtype == BROKER:
        _check_broker_name(ctx, name)
        validate_broker_dynamic_configs(dict(new), cluster_default=name == "")
        store = services.metadata
        if name == "":  # the cluster-wide defaults, below each broker's own
            _check_connection_limits(ctx, {**new, **store.broker_configs()})
            if not validate_only:
                await store.set_default_broker_configs(new)
                log.info("Cluster-wide dynamic broker defaults set to %s by %s", dict(new), ctx.client)
        else:
            _check_connection_limits(ctx, {**store.default_broker_configs(), **new})
            if not validate_only:
                await store.set_broker_configs(new)
                log.info("Broker dynamic configs set to %s by %s", dict(new), ctx.client)
    elif rtype == GROUP:
        await apply_group_configs(ctx, name, new, validate_only)
    elif rtype == CLIENT_METRICS:
        await apply_client_metrics_configs(ctx, name, new, validate_only)
    elif rtype == BROKER_LOGGER:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST, "AlterConfigs is deprecated and does not support the resource type BROKER_LOGGER"
        )
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not supported")


def _check_connection_limits(ctx: RequestContext, dynamic: Mapping[str, str]) -> None:
    """What Kafka checks across the connection limits: the overrides' hosts resolve, and a zero
    per-address limit comes with overrides."""
    overrides = effective_broker_value(ctx.services.config, "max.connections.per.ip.overrides", dynamic)
    try:
        resolved = per_ip_overrides(overrides or "")
    except ValueError as e:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid max.connections.per.ip.overrides: {e}") from None
    if effective_broker_value(ctx.services.config, "max.connections.per.ip", dynamic) == 0 and not resolved:
        raise KafkaError(ErrorCode.INVALID_CONFIG, PER_IP_ZERO_PROBLEM)


def _current(ctx: RequestContext, rtype: int, name: str) -> dict[str, str]:
    if rtype == TOPIC:
        topic = ctx.services.metadata.topic(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
        return dict(topic.configs)
    if rtype == BROKER:
        store = ctx.services.metadata
        return dict(store.default_broker_configs() if name == "" else store.broker_configs())
    if rtype == GROUP:
        return dict(ctx.services.metadata.group_configs(name))
    if rtype == CLIENT_METRICS:
        return current_client_metrics(ctx, name)
    return {}


def _unique_resources(request: Body, responses: list[Body]) -> list[Body]:
    """The resources an Alter(Incremental)Configs request names once; each one it names more than once is
    answered once with INVALID_REQUEST and left alone, as Kafka does."""
    twice = repeated((r["resource_type"], r["resource_name"]) for r in request["resources"])
    for rtype, name in twice:
        responses.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": "Duplicate resource.",
                          "resource_type": rtype, "resource_name": name})  # fmt: skip
    return [r for r in request["resources"] if (r["resource_type"], r["resource_name"]) not in twice]


def _check_unique_keys(configs: list[Body]) -> None:
    twice = sorted(repeated(c["name"] for c in configs))
    if twice:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(twice)}")


@handler(ApiKey.ALTER_CONFIGS, 0, 2)
async def handle_alter_configs(ctx: RequestContext, request: Body) -> Body:
    validate_only = request.get("validate_only", False)
    responses: list[Body] = []
    for r in _unique_resources(request, responses):
        rtype, name = r["resource_type"], r["resource_name"]
        out: Body = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": name}
        try:
            _check_access(ctx, rtype, name, AclOperation.ALTER_CONFIGS)
            _check_unique_keys(r["configs"])
            # AlterConfigs replaces the resource's whole set of dynamic configs.
            new = {c["name"]: c["value"] for c in r["configs"] if c["value"] is not None}
            await _apply(ctx, rtype, name, new, validate_only)
        except KafkaError as e:
            out.update(error_code=e.code, error_message=e.message)
        responses.append(out)
    return {"throttle_time_ms": 0, "responses": responses}


@handler(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext, request: Body) -> Body:
    validate_only = request.get("validate_only", False)
    responses: list[Body] = []
    for r in _unique_resources(request, responses):
        rtype, name = r["resource_type"], r["resource_name"]
        out: Body = {"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": name}
        try:
            _check_access(ctx, rtype, name, AclOperation.ALTER_CONFIGS)
            _check_unique_keys(r["configs"])
            if rtype == BROKER_LOGGER:
                _alter_logger_levels(ctx, name, r["configs"], validate_only)
                responses.append(out)
                continue
            current = _current(ctx, rtype, name)
            defaults = (
                {e.name: e.value for e in _entries(ctx, rtype, name)} if rtype in (TOPIC, BROKER) else {}
            )
            for c in r["configs"]:
                key, op, value = c["name"], c["config_operation"], c["value"]
                if op == SET:
                    if value is None:
                        raise KafkaError(ErrorCode.INVALID_CONFIG, f"null value for {key}")
                    current[key] = value
                elif op == DELETE:
                    current.pop(key, None)
                elif op in (APPEND, SUBTRACT):
                    base = current.get(key, defaults.get(key) or "")
                    items = [x for x in (base or "").split(",") if x]
                    given = [x for x in (value or "").split(",") if x]
                    if op == APPEND:
                        items += [x for x in given if x not in items]
                    else:
                        items = [x for x in items if x not in given]
                    current[key] = ",".join(items)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown config operation {op}")
            await _apply(ctx, rtype, name, current, validate_only)
        except KafkaError as e:
            out.update(error_code=e.code, error_message=e.message)
        responses.append(out)
    return {"throttle_time_ms": 0, "responses": responses}
