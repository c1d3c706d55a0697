"""``rill configs``: describe and alter broker and topic configs, as Kafka's ``kafka-configs`` does.

    rill configs describe --entity-type topics --entity-name orders [--all]
    rill configs describe --entity-type brokers [--entity-name 0] [--all]
    rill configs alter --entity-type topics --entity-name orders \\
        --add-config retention.ms=60000,cleanup.policy=compact
    rill configs alter --entity-type brokers --entity-name 0 --delete-config log.retention.ms
    rill configs alter --entity-type users --entity-name alice --add-config 'SCRAM-SHA-256=[password=secret]'
    rill configs alter --entity-type clients --entity-name reporting --add-config producer_byte_rate=5242880
    rill configs alter --entity-type users --entity-default --add-config consumer_byte_rate=1048576
    rill configs alter --entity-type client-metrics --entity-name producers \\
        --add-config 'metrics=[org.apache.kafka.producer.],interval.ms=5000'

Client quotas (``--entity-type users`` and/or ``clients``, each with ``--entity-name`` or ``--entity-default``):
``_client_quotas``. Client metrics subscriptions (KIP-714, ``--entity-type client-metrics``): ``_client_metrics``.

For brokers, ``--entity-name`` defaults to the broker's id when the cluster has one broker. (Kafka's
``--entity-default``, the cluster-wide default, is not offered: librdkafka cannot name that resource.)
Kafka's own form works too: ``rill configs --describe --entity-type topics --entity-name orders``, ``--alter``.

``describe`` lists what was set at run time for the entity, as kafka-configs does (a topic's own configs,
a broker's dynamic ones), unless ``--all`` is given; every row shows where its value comes from:
``default``, ``static`` (broker config file), or ``dynamic-topic`` / ``dynamic-broker`` /
``dynamic-default-broker`` (set at run time). ``alter`` uses IncrementalAlterConfigs
(set / delete one key at a time), so configs not named stay as they are.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rill.cli._client_metrics import alter_client_metrics, describe_client_metrics
from rill.cli._client_quotas import QUOTA_KEYS, alter_quotas, describe_quotas
from rill.cli._common import (
    EXIT_USAGE,
    CliError,
    Table,
    add_connection_options,
    add_subparsers,
    client_config,
    describe_kafka_exception,
    ensure_reachable,
    kafka_tool_form,
    new_parser,
    parse_config_list,
    print_json,
    print_table,
    run_main,
    split_outside_brackets,
    wait_future,
)
from rill.cli._users import alter_users, check_user_args, describe_users

ENTITY_TYPES = ("topics", "brokers", "users", "clients", "client-metrics")

# confluent_kafka.admin.ConfigSource values -> labels shown to the user.
SOURCE_LABELS = {
    0: "unknown",
    1: "dynamic-topic",
    2: "dynamic-broker",
    3: "dynamic-default-broker",
    4: "static",
    5: "default",
    6: "dynamic-broker-logger",
    7: "client-metrics",
    8: "dynamic-group",
}


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "read_only": self.read_only,
            "sensitive": self.sensitive,
        }


def admin_client(args: argparse.Namespace) -> Any:
    """An AdminClient for the parsed connection options, after checking the broker answers TCP."""
    ensure_reachable(args.bootstrap_server, args.timeout)
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(args))


def fetch_metadata(admin: Any, timeout_s: float) -> Any:
    try:
        return admin.list_topics(timeout=timeout_s)
    except Exception as e:
        raise CliError(f"cannot read cluster metadata: {describe_kafka_exception(e)}") from None


def require_topic(metadata: Any, topic: str) -> Any:
    tm = metadata.topics.get(topic)
    if tm is None:
        raise CliError(f"unknown topic '{topic}' (UNKNOWN_TOPIC_OR_PARTITION)")
    if tm.error is not None and tm.error.name() not in ("LEADER_NOT_AVAILABLE",):
        raise CliError(f"topic '{topic}': {tm.error.name()}: {tm.error.str()}")
    return tm


def _resource(entity_type: str, name: str, incremental: list[Any] | None = None) -> Any:
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    rtype = ResourceType.TOPIC if entity_type == "topics" else ResourceType.BROKER
    if incremental is None:
        return ConfigResource(rtype, name)
    return ConfigResource(rtype, name, incremental_configs=incremental)


def describe_config_rows(admin: Any, entity_type: str, name: str, timeout_s: float) -> list[ConfigRow]:
    futures = admin.describe_configs([_resource(entity_type, name)], request_timeout=timeout_s)
    rows: list[ConfigRow] = []
    for fut in futures.values():
        try:
            entries = wait_future(fut, timeout_s + 1.0, "describe configs")
        except CliError:
            raise
        except Exception as e:
            raise CliError(
                f"cannot describe configs of {entity_type[:-1]} '{name}': {describe_kafka_exception(e)}"
            ) from None
        for entry_name, entry in sorted(entries.items()):
            rows.append(
                ConfigRow(
                    name=entry_name,
                    value=None if entry.is_sensitive else entry.value,
                    source=SOURCE_LABELS.get(int(getattr(entry.source, "value", entry.source)), "unknown"),
                    read_only=bool(entry.is_read_only),
                    sensitive=bool(entry.is_sensitive),
                )
            )
    return rows


def overrides(rows: list[ConfigRow]) -> list[ConfigRow]:
    return [r for r in rows if r.source not in ("default", "unknown")]


_DYNAMIC = {"topics": ("dynamic-topic",), "brokers": ("dynamic-broker", "dynamic-default-broker")}


def dynamic_rows(entity_type: str, rows: list[ConfigRow]) -> list[ConfigRow]:
    """The rows set at run time for an entity of ``entity_type``: what ``describe`` lists without ``--all``."""
    return [r for r in rows if r.source in _DYNAMIC[entity_type]]


def alter_configs(
    admin: Any,
    entity_type: str,
    name: str,
    set_configs: dict[str, str],
    delete_configs: list[str],
    timeout_s: float,
) -> None:
    """Apply SET/DELETE operations with IncrementalAlterConfigs; one line on failure."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry  # type: ignore[attr-defined]

    check_alterations(set_configs, delete_configs)
    ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_configs.items()]
    ops += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete_configs]
    futures = admin.incremental_alter_configs([_resource(entity_type, name, ops)], request_timeout=timeout_s)
    for fut in futures.values():
        try:
            wait_future(fut, timeout_s + 1.0, "alter configs")
        except CliError:
            raise
        except Exception as e:
            raise CliError(
                f"cannot alter configs of {entity_type[:-1]} '{name}': {describe_kafka_exception(e)}"
            ) from None


def check_alterations(set_configs: dict[str, str], delete_configs: list[str]) -> None:
    """Usage errors of an alteration, found before the broker is asked."""
    both = set(set_configs) & set(delete_configs)
    if both:
        raise CliError(f"config(s) both added and deleted: {', '.join(sorted(both))}", EXIT_USAGE)
    if not set_configs and not delete_configs:
        raise CliError("nothing to alter: give --add-config and/or --delete-config", EXIT_USAGE)


def parse_delete_list(items: list[str] | None) -> list[str]:
    names: list[str] = []
    for item in items or ():
        names += [p.strip() for p in split_outside_brackets(item) if p.strip()]
    return names


def print_config_rows(rows: list[ConfigRow], title: str) -> None:
    sys.stdout.write(f"{title}\n")
    if not rows:
        sys.stdout.write("  (none)\n")
        return
    table = Table(
        ("NAME", "VALUE", "SOURCE", "READ-ONLY"),
        [(r.name, "(sensitive)" if r.sensitive else r.value, r.source, r.read_only) for r in rows],
    )
    print_table(table)


# ---------------------------------------------------------------------------------------------- the command


def _build_parser() -> argparse.ArgumentParser:
    parser = new_parser("rill configs", "Describe and alter broker and topic configs.")
    sub = add_subparsers(parser)
    for command, help_text in (
        ("describe", "show configs and their sources"),
        ("alter", "set or delete configs"),
    ):
        p = sub.add_parser(command, help=help_text, description=help_text)
        p.add_argument(
            "--entity-type",
            dest="entity_types",
            action="append",
            required=True,
            choices=ENTITY_TYPES,
            help="topic, broker, user, client (users and clients together: a user's client) or client-metrics",
        )
        p.add_argument(
            "--entity-name",
            dest="entity_names",
            action="append",
            metavar="NAME",
            help="topic name, broker id, user name, client id or client metrics subscription",
        )
        p.add_argument(
            "--entity-default",
            dest="entity_names",
            action="append_const",
            const=None,
            help="the default user or client id (client quotas)",
        )
        if command == "describe":
            p.add_argument("--all", action="store_true", help="list every config, not only overrides")
        else:
            p.add_argument("--add-config", action="append", metavar="K=V[,K=V]", help="configs to set (repeatable)")
            p.add_argument("--delete-config", action="append", metavar="K[,K]", help="configs to remove (repeatable)")
        add_connection_options(p, json_output=command == "describe")
    return parser


def _check_entity_args(args: argparse.Namespace) -> None:
    """Usage errors of --entity-type/--entity-name, found before the broker is asked."""
    if args.entity_type == "brokers" and args.entity_name and not args.entity_name.isdigit():
        raise CliError(f"invalid broker id '{args.entity_name}': expected a number", EXIT_USAGE)
    if args.entity_type == "topics" and not args.entity_name:
        raise CliError("--entity-name is required for --entity-type topics", EXIT_USAGE)


def _entity_name(args: argparse.Namespace, admin: Any) -> str:
    _check_entity_args(args)
    if args.entity_name:
        if args.entity_type == "brokers":
            known = sorted(fetch_metadata(admin, args.timeout).brokers)
            if int(args.entity_name) not in known:
                raise CliError(f"no broker with id {args.entity_name} (brokers: {', '.join(map(str, known))})")
        return str(args.entity_name)
    if args.entity_type == "topics":
        raise CliError("--entity-name is required for --entity-type topics", EXIT_USAGE)
    md = fetch_metadata(admin, args.timeout)
    if len(md.brokers) != 1:
        raise CliError("several brokers: give --entity-name BROKER_ID or --entity-default", EXIT_USAGE)
    return str(next(iter(md.brokers)))


def _uses_quotas(args: argparse.Namespace) -> bool:
    return "clients" in args.entity_types or len(args.entity_types) > 1 or None in (args.entity_names or [])


def _describe(args: argparse.Namespace) -> int:
    if args.entity_types == ["client-metrics"]:
        return describe_client_metrics(args)
    if _uses_quotas(args):
        return describe_quotas(args)
    _check_entity_args(args)
    admin = admin_client(args)
    if args.entity_type == "users":
        describe_quotas(args)
        describe_users(admin, args.entity_name, args.timeout, args.json)
        return 0
    name = _entity_name(args, admin)
    if args.entity_type == "topics":
        require_topic(fetch_metadata(admin, args.timeout), name)
    rows = describe_config_rows(admin, args.entity_type, name, args.timeout)
    shown = rows if args.all else dynamic_rows(args.entity_type, rows)
    label = f"topic {name}" if args.entity_type == "topics" else f"broker {name}"
    if args.json:
        print_json({"entity_type": args.entity_type, "entity_name": name, "configs": [r.as_json() for r in shown]})
    else:
        print_config_rows(shown, f"{'All' if args.all else 'Dynamic'} configs for {label}:")
    return 0


def _alter(args: argparse.Namespace) -> int:
    set_configs = parse_config_list(args.add_config)
    delete_configs = parse_delete_list(args.delete_config)
    _check_entity_args(args)
    check_alterations(set_configs, delete_configs)
    if args.entity_types == ["client-metrics"]:
        return alter_client_metrics(args, set_configs, delete_configs)
    if _uses_quotas(args):
        return alter_quotas(args, set_configs, delete_configs)
    quota_set = {k: v for k, v in set_configs.items() if k in QUOTA_KEYS}
    quota_delete = [k for k in delete_configs if k in QUOTA_KEYS]
    if args.entity_type == "users" and (quota_set or quota_delete):
        alter_quotas(args, quota_set, quota_delete)
        set_configs = {k: v for k, v in set_configs.items() if k not in QUOTA_KEYS}
        delete_configs = [k for k in delete_configs if k not in QUOTA_KEYS]
        if not set_configs and not delete_configs:
            return 0
    admin = admin_client(args)
    if args.entity_type == "users":
        check_user_args(args, altering=True)
        alter_users(admin, args.entity_name, set_configs, delete_configs, args.timeout)
        return 0
    name = _entity_name(args, admin)
    if args.entity_type == "topics":
        require_topic(fetch_metadata(admin, args.timeout), name)
    alter_configs(admin, args.entity_type, name, set_configs, delete_configs, args.timeout)
    label = f"topic '{name}'" if args.entity_type == "topics" else f"broker {name}"
    sys.stdout.write(f"Completed updating config for {label}.\n")
    return 0


KAFKA_ACTIONS = {"--describe": "describe", "--alter": "alter"}
"""kafka-configs.sh's action flags, and the subcommand each one is."""


def _body(argv: list[str]) -> int:
    args = _build_parser().parse_args(kafka_tool_form(argv, KAFKA_ACTIONS))
    args.entity_type = args.entity_types[0]
    args.entity_name = args.entity_names[0] if args.entity_names else None
    if None in (args.entity_names or []) and not set(args.entity_types) <= {"users", "clients"}:
        raise CliError("--entity-default is for users and clients (client quotas)", EXIT_USAGE)
    if args.command == "describe":
        return _describe(args)
    return _alter(args)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_body, argv)


if __name__ == "__main__":
    sys.exit(main())
