"""``rill configs`` for client metrics subscriptions (``--entity-type client-metrics``, KIP-714), as
``kafka-configs.sh``/``kafka-client-metrics.sh`` manage them through IncrementalAlterConfigs, DescribeConfigs and
ListConfigResources on the CLIENT_METRICS resource type (16):

    rill configs --alter --entity-type client-metrics --entity-name producers \\
        --add-config 'metrics=[org.apache.kafka.producer.],interval.ms=5000,match=[client_software_name=librdkafka]'
    rill configs --alter --entity-type client-metrics --entity-name producers --delete-config interval.ms
    rill configs --describe --entity-type client-metrics [--entity-name producers]

Deleting every config of a subscription removes it. The requests go over Rill's own client (librdkafka's admin
client has no CLIENT_METRICS resource type), secured by ``--command-config``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rill.cli._client_quotas import _connection
from rill.cli._common import EXIT_USAGE, CliError, Table, print_json, print_table

CLIENT_METRICS = 16
SET, DELETE = 0, 1
_SOURCES = {5: "default", 7: "client-metrics"}


def _request(args: argparse.Namespace, api_key: int, body: dict[str, Any], newest: int) -> dict[str, Any]:
    from rill.errors import KafkaError

    conn = _connection(args)
    try:
        supported = conn.api_versions.get(api_key)
        if supported is None:
            raise CliError("the broker does not support client metrics subscriptions (Kafka 3.7 or later does)")
        _, response = conn.request(api_key, body, version=min(newest, supported[1]))
        return dict(response)
    except KafkaError as e:
        raise CliError(f"client metrics request failed: {e.message}") from None
    finally:
        conn.close()


def _error(code: int, message: str | None, what: str) -> None:
    if code:
        from rill.errors import ErrorCode

        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise CliError(f"cannot {what}: {name}: {message or ''}".rstrip(": "))


def alter_client_metrics(args: argparse.Namespace, set_configs: dict[str, str], delete_configs: list[str]) -> int:
    from rill.protocol import ApiKey

    name = args.entity_name
    if not name:
        raise CliError("--entity-name is required for --entity-type client-metrics", EXIT_USAGE)
    configs = [{"name": k, "config_operation": SET, "value": v} for k, v in set_configs.items()]
    configs += [{"name": k, "config_operation": DELETE, "value": None} for k in delete_configs]
    body = {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configs": configs}],
            "validate_only": False}  # fmt: skip
    response = _request(args, ApiKey.INCREMENTAL_ALTER_CONFIGS, body, 1)
    for r in response["responses"]:
        _error(r["error_code"], r.get("error_message"), f"alter client metrics subscription '{name}'")
    sys.stdout.write(f"Completed updating config for client-metric {name}.\n")
    return 0


def describe_client_metrics(args: argparse.Namespace) -> int:
    from rill.protocol import ApiKey

    names = [args.entity_name] if args.entity_name else []
    if not names:
        listed = _request(args, ApiKey.LIST_CONFIG_RESOURCES, {"resource_types": [CLIENT_METRICS]}, 1)
        _error(listed["error_code"], None, "list client metrics subscriptions")
        names = sorted(r["resource_name"] for r in listed["config_resources"])
    out: list[dict[str, Any]] = []
    if names:
        resources = [{"resource_type": CLIENT_METRICS, "resource_name": n, "configuration_keys": None} for n in names]
        response = _request(args, ApiKey.DESCRIBE_CONFIGS, {"resources": resources}, 4)
        for r in response["results"]:
            _error(
                r["error_code"], r.get("error_message"), f"describe client metrics subscription '{r['resource_name']}'"
            )
            rows = [{"name": c["name"], "value": c["value"], "source": _SOURCES.get(c["config_source"], "unknown")}
                    for c in r["configs"]]  # fmt: skip
            out.append({"entity_name": r["resource_name"], "configs": rows})
    if args.json:
        print_json({"entity_type": "client-metrics", "subscriptions": out})
        return 0
    if not out:
        sys.stdout.write("No client metrics subscriptions.\n")
    for sub in out:
        sys.stdout.write(f"Configs for client-metric {sub['entity_name']}:\n")
        print_table(Table(("NAME", "VALUE", "SOURCE"), [(c["name"], c["value"], c["source"]) for c in sub["configs"]]))
    return 0
