"""``rill configs`` for client quotas (``--entity-type users`` and/or ``clients``), as kafka-configs manages them
through DescribeClientQuotas and AlterClientQuotas (KIP-546).

    rill configs --alter --entity-type clients --entity-name reporting --add-config producer_byte_rate=5242880
    rill configs --alter --entity-type users --entity-name alice --entity-type clients --entity-default \\
        --add-config consumer_byte_rate=1048576,request_percentage=50
    rill configs --alter --entity-type users --entity-default --delete-config producer_byte_rate
    rill configs --describe --entity-type users [--entity-name alice] [--entity-type clients]

``--entity-default`` in place of ``--entity-name`` names the default of that level. The requests go over Rill's
own client (the confluent-kafka admin client has no client quota calls), secured by ``--command-config``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rill.cli._common import EXIT_USAGE, CliError, print_json

QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
TYPES = {"users": "user", "clients": "client-id"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


def entities(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    """(protocol entity type, name or None for the default, whether a name or default was given) per
    ``--entity-type``, paired in order with ``--entity-name``/``--entity-default``."""
    names: list[str | None] = list(args.entity_names or [])
    types: list[str] = list(args.entity_types or [])
    if len(names) > len(types):
        raise CliError("more --entity-name/--entity-default than --entity-type", EXIT_USAGE)
    if len(set(types)) != len(types):
        raise CliError("an --entity-type given twice", EXIT_USAGE)
    out: list[tuple[str, str | None, bool]] = []
    for i, kind in enumerate(types):
        if kind not in TYPES:
            raise CliError(f"--entity-type {kind} cannot be combined with users or clients", EXIT_USAGE)
        out.append((TYPES[kind], names[i] if i < len(names) else None, i < len(names)))
    return out


def _connection(args: argparse.Namespace) -> Any:
    from rill.cli._client_security import rill_client_security
    from rill.client.connection import BrokerConnection, parse_bootstrap
    from rill.client.security import AuthenticationError
    from rill.errors import KafkaError

    security = rill_client_security(args.command_config)
    last = ""
    for host, port in parse_bootstrap(args.bootstrap_server):
        try:
            return BrokerConnection(host, port, client_id="rill-configs", timeout_s=args.timeout, security=security)
        except AuthenticationError as e:
            raise CliError(e.message) from None
        except (KafkaError, OSError) as e:
            last = str(e)
    raise CliError(f"cannot reach {args.bootstrap_server}: {last}")


def _request(args: argparse.Namespace, api_key: int, body: dict[str, Any]) -> dict[str, Any]:
    from rill.errors import KafkaError

    conn = _connection(args)
    try:
        supported = conn.api_versions.get(api_key)
        if supported is None:
            raise CliError("the broker does not support client quota APIs (Kafka 2.6 or later does)")
        _, response = conn.request(api_key, body, version=min(1, supported[1]))
        return dict(response)
    except KafkaError as e:
        raise CliError(f"client quota request failed: {e.message}") from None
    finally:
        conn.close()


def _label(entity: list[dict[str, Any]]) -> str:
    parts = []
    for c in entity:
        kind = "user-principal" if c["entity_type"] == "user" else "client-id"
        name = c["entity_name"]
        parts.append(f"the default {kind}" if name is None else f"{kind} '{name}'")
    return ", ".join(parts)


def alter_quotas(args: argparse.Namespace, set_configs: dict[str, str], delete_configs: list[str]) -> int:
    from rill.errors import ErrorCode
    from rill.protocol.api import ApiKey

    wanted = entities(args)
    unnamed = [t for t, _, given in wanted if not given]
    if unnamed:
        raise CliError(f"give --entity-name or --entity-default for each --entity-type ({unnamed[0]})", EXIT_USAGE)
    ops: list[dict[str, Any]] = []
    for key, text in set_configs.items():
        try:
            value = float(text)
        except ValueError:
            raise CliError(f"{key}={text}: not a number", EXIT_USAGE) from None
        ops.append({"key": key, "value": value, "remove": False})
    ops += [{"key": key, "value": 0.0, "remove": True} for key in delete_configs]
    entity = [{"entity_type": t, "entity_name": n} for t, n, _ in wanted]
    body = {"entries": [{"entity": entity, "ops": ops}], "validate_only": False}
    response = _request(args, ApiKey.ALTER_CLIENT_QUOTAS, body)
    for entry in response["entries"]:
        if entry["error_code"]:
            code = ErrorCode(entry["error_code"]).name
            raise CliError(f"cannot alter quotas of {_label(entity)}: {code}: {entry['error_message'] or code}")
    sys.stdout.write(f"Completed updating config for {_label(entity)}.\n")
    return 0


def describe_quotas(args: argparse.Namespace) -> int:
    from rill.errors import ErrorCode
    from rill.protocol.api import ApiKey

    components = []
    for kind, name, given in entities(args):
        match_type = MATCH_ANY if not given else MATCH_DEFAULT if name is None else MATCH_EXACT
        components.append({"entity_type": kind, "match_type": match_type, "match": name if given else None})
    response = _request(args, ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": True})
    if response["error_code"]:
        code = ErrorCode(response["error_code"]).name
        raise CliError(f"cannot describe client quotas: {code}: {response['error_message'] or code}")
    entries = sorted(response["entries"] or [], key=lambda e: _label(e["entity"]))
    if getattr(args, "json", False):
        print_json({"quotas": [{"entity": e["entity"], "values": {v["key"]: v["value"] for v in e["values"]}}
                               for e in entries]})  # fmt: skip
        return 0
    for e in entries:
        values = ", ".join(f"{v['key']}={v['value']}" for v in e["values"])
        sys.stdout.write(f"Quota configs for {_label(e['entity'])} are {values}\n")
    return 0
