"""``rill acls``: add, list and remove ACLs, as kafka-acls does.

    rill acls --bootstrap-server HOST:PORT --add --allow-principal User:alice --operation Read --topic orders
    rill acls --add --allow-principal User:bob --operation Write --topic team-a. --resource-pattern-type prefixed
    rill acls --add --deny-principal User:carol --allow-host '*' --operation All --group payments
    rill acls --add --allow-principal User:svc --consumer --topic orders --group svc-
    rill acls --list [--topic orders] [--principal User:alice] [--resource-pattern-type match]
    rill acls --remove --topic orders [--allow-principal User:alice --operation Read] [--force]

Resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and ``--cluster``. ``--add`` makes
every combination of resource, principal, host and operation (hosts default to ``*``; operations to All);
``--producer`` and ``--consumer`` stand for the operations those clients need. ``--remove`` without principals
removes every ACL of the resources. The client settings (SASL, TLS) come from ``--command-config``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rill.cli._common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_connection_options,
    client_config,
    describe_kafka_exception,
    ensure_reachable,
    new_parser,
    print_json,
    run_main,
)

CLUSTER_NAME = "kafka-cluster"
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def _parser() -> argparse.ArgumentParser:
    p = new_parser("rill acls", "Add, list and remove ACLs (kafka-acls's options).")
    add_connection_options(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    p.add_argument("--topic", action="append", default=[], metavar="NAME", help="a topic ('*': every topic)")
    p.add_argument("--group", action="append", default=[], metavar="NAME", help="a consumer group")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID", help="a transactional id")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument("--resource-pattern-type", default=None, choices=PATTERN_TYPES, type=str.lower,
                   help="literal (default) or prefixed; --list and --remove also take match and any")  # fmt: skip
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                   help="a principal allowed (User:alice; User:* for everyone)")  # fmt: skip
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME", help="a principal denied")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="an IP address the allowed principals may come from (default *)")  # fmt: skip
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                   help="an IP address the denied principals are refused from (default *)")  # fmt: skip
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite or All (default All)")  # fmt: skip
    p.add_argument("--producer", action="store_true", help="Write, Describe, Create on the topics (and Write, "
                   "Describe on the transactional ids)")  # fmt: skip
    p.add_argument("--consumer", action="store_true", help="Read, Describe on the topics, Read on the groups")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME", help="--list: only these")
    p.add_argument("--force", action="store_true", help="--remove: do not ask for confirmation")
    return p


def _enums() -> Any:
    from confluent_kafka import admin

    return admin


def _operation(name: str) -> Any:
    a = _enums()
    key = "".join(ch for ch in name if ch.isalnum()).upper()
    names = {"".join(op.name.split("_")): op for op in a.AclOperation if op.name not in ("UNKNOWN", "ANY")}
    if key not in names:
        known = ", ".join(sorted(n.title() for n in names))
        raise CliError(f"unknown operation {name!r} (one of {known})", EXIT_USAGE)
    return names[key]


def _resources(args: argparse.Namespace) -> list[tuple[Any, str]]:
    a = _enums()
    out = [(a.ResourceType.TOPIC, t) for t in args.topic]
    out += [(a.ResourceType.GROUP, g) for g in args.group]
    out += [(a.ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((a.ResourceType.BROKER, CLUSTER_NAME))
    return out


def _pattern(args: argparse.Namespace, default: str) -> Any:
    return _enums().ResourcePatternType[(args.resource_pattern_type or default).upper()]


def _entries(args: argparse.Namespace, resource_type: Any) -> list[tuple[str, str, Any, Any]]:
    """(principal, host, operation, permission) of every entry ``--add`` makes on one resource."""
    a = _enums()
    ops = [_operation(o) for o in args.operation]
    if args.producer:
        if resource_type == a.ResourceType.TOPIC:
            ops += [a.AclOperation.WRITE, a.AclOperation.DESCRIBE, a.AclOperation.CREATE]
        elif resource_type == a.ResourceType.TRANSACTIONAL_ID:
            ops += [a.AclOperation.WRITE, a.AclOperation.DESCRIBE]
    if args.consumer:
        if resource_type == a.ResourceType.TOPIC:
            ops += [a.AclOperation.READ, a.AclOperation.DESCRIBE]
        elif resource_type == a.ResourceType.GROUP:
            ops += [a.AclOperation.READ]
    if not ops and (args.producer or args.consumer):
        return []
    ops = list(dict.fromkeys(ops or [a.AclOperation.ALL]))
    out = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host or ["*"], a.AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host or ["*"], a.AclPermissionType.DENY),
    ):
        for principal in principals:
            if ":" not in principal:
                raise CliError(f"{principal!r} is not a principal (Type:name, e.g. User:alice)", EXIT_USAGE)
            out += [(principal, host, op, permission) for host in hosts for op in ops]
    return out


def _add(admin: Any, args: argparse.Namespace, timeout_s: float) -> None:
    a = _enums()
    if not args.allow_principal and not args.deny_principal:
        raise CliError("--add needs --allow-principal or --deny-principal", EXIT_USAGE)
    if args.resource_pattern_type in ("match", "any"):
        raise CliError("--add takes --resource-pattern-type literal or prefixed", EXIT_USAGE)
    pattern = _pattern(args, "literal")
    bindings = [
        a.AclBinding(rtype, name, pattern, principal, host, op, permission)
        for rtype, name in _resources(args)
        for principal, host, op, permission in _entries(args, rtype)
    ]
    if not bindings:
        raise CliError("nothing to add: name a resource (--topic, --group, --transactional-id, --cluster)",
                       EXIT_USAGE)  # fmt: skip
    for binding, future in admin.create_acls(bindings, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as e:
            raise CliError(f"cannot add {_describe(binding)}: {describe_kafka_exception(e)}") from None
        sys.stdout.write(f"Added ACL {_describe(binding)}\n")


def _filters(args: argparse.Namespace, default_pattern: str) -> list[Any]:
    a = _enums()
    resources: list[tuple[Any, str | None]] = [*_resources(args)] or [(a.ResourceType.ANY, None)]
    pattern = _pattern(args, default_pattern if _resources(args) else "any")
    principals = args.principal or [None]
    return [
        a.AclBindingFilter(rtype, name, pattern, principal, None, a.AclOperation.ANY, a.AclPermissionType.ANY)
        for rtype, name in resources
        for principal in principals
    ]


def _list(admin: Any, args: argparse.Namespace, timeout_s: float) -> None:
    found: dict[Any, list[Any]] = {}
    for flt in _filters(args, "literal"):
        try:
            bindings = admin.describe_acls(flt, request_timeout=timeout_s).result(timeout=timeout_s)
        except Exception as e:
            raise CliError(f"cannot list ACLs: {describe_kafka_exception(e)}") from None
        for b in bindings:
            found.setdefault((b.restype, b.name, b.resource_pattern_type), []).append(b)
    if args.json:
        print_json([{"resource_type": k[0].name, "name": k[1], "pattern_type": k[2].name,
                     "acls": [{"principal": b.principal, "host": b.host, "operation": b.operation.name,
                               "permission_type": b.permission_type.name} for b in v]}
                    for k, v in found.items()])  # fmt: skip
        return
    for (rtype, name, pattern), bindings in found.items():
        sys.stdout.write(f"Current ACLs for resource `ResourcePattern(resourceType={_type_name(rtype)}, "
                         f"name={name}, patternType={pattern.name})`:\n")  # fmt: skip
        for b in bindings:
            sys.stdout.write(f" \t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                             f"permissionType={b.permission_type.name})\n")  # fmt: skip
        sys.stdout.write("\n")


def _remove(admin: Any, args: argparse.Namespace, timeout_s: float) -> None:
    a = _enums()
    resources = _resources(args)
    if not resources:
        raise CliError("--remove needs a resource (--topic, --group, --transactional-id, --cluster)", EXIT_USAGE)
    pattern = _pattern(args, "literal")
    if args.allow_principal or args.deny_principal:
        filters = [
            a.AclBindingFilter(rtype, name, pattern, principal, host, op, permission)
            for rtype, name in resources
            for principal, host, op, permission in _entries(args, rtype)
        ]
    else:  # every ACL of the resources
        filters = [a.AclBindingFilter(rtype, name, pattern, None, None, a.AclOperation.ANY, a.AclPermissionType.ANY)
                   for rtype, name in resources]  # fmt: skip
    if not args.force and sys.stdin.isatty():
        answer = input(f"Are you sure you want to remove ACLs of {len(resources)} resource(s)? (y/n) ")
        if answer.strip().lower() not in ("y", "yes"):
            return
    for flt, future in admin.delete_acls(filters, request_timeout=timeout_s).items():
        try:
            removed = future.result(timeout=timeout_s)
        except Exception as e:
            raise CliError(f"cannot remove ACLs: {describe_kafka_exception(e)}") from None
        for b in removed:
            sys.stdout.write(f"Removed ACL {_describe(b)}\n")
        if not removed:
            sys.stdout.write(f"No ACL matched {_describe(flt)}\n")


def _type_name(rtype: Any) -> str:
    return "CLUSTER" if rtype.name == "BROKER" else str(rtype.name)


def _describe(b: Any) -> str:
    return (f"(principal={b.principal or '*any*'}, host={b.host or '*any*'}, operation={b.operation.name}, "
            f"permissionType={b.permission_type.name}) on {_type_name(b.restype)}:{b.resource_pattern_type.name}:"
            f"{b.name if b.name is not None else '*any*'}")  # fmt: skip


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from confluent_kafka.admin import AdminClient

    ensure_reachable(args.bootstrap_server, args.timeout)
    admin = AdminClient(client_config(args))
    timeout_s = max(args.timeout, 1.0)
    if args.add:
        _add(admin, args, timeout_s)
    elif args.list:
        _list(admin, args, timeout_s)
    else:
        _remove(admin, args, timeout_s)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(_run, argv)
