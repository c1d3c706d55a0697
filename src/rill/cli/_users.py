"""``rill configs`` for ``--entity-type users``: SCRAM credentials, as kafka-configs manages them.

    rill configs alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=alice-secret]'
    rill configs alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    rill configs describe --entity-type users [--entity-name alice]

The password never leaves this process: the client salts and hashes it (AlterUserScramCredentials carries the
salt and the salted password). Iterations default to 4096, Kafka's minimum.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rill.cli._common import EXIT_USAGE, CliError, describe_kafka_exception, print_json

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin._scram import ScramMechanism

    if name not in MECHANISMS:
        raise CliError(f"unknown SCRAM mechanism {name!r}: expected one of {', '.join(MECHANISMS)}", EXIT_USAGE)
    return ScramMechanism.SCRAM_SHA_256 if name == "SCRAM-SHA-256" else ScramMechanism.SCRAM_SHA_512


def _credential(mechanism: str, text: str) -> tuple[int, str]:
    """``iterations=N,password=P`` (iterations optional) -> (iterations, password)."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise CliError(f"{mechanism}=[{text}]: expected [iterations=N,]password=P", EXIT_USAGE)
        fields[key.strip()] = value
    if "password" not in fields:
        raise CliError(f"{mechanism}: no password given ({mechanism}=[password=...])", EXIT_USAGE)
    try:
        iterations = int(fields.get("iterations", "4096"))
    except ValueError:
        raise CliError(f"{mechanism}: iterations must be a number", EXIT_USAGE) from None
    return iterations, fields["password"]


def alter_users(
    admin: Any, user: str, set_configs: dict[str, str], delete_configs: list[str], timeout_s: float
) -> None:
    from confluent_kafka.admin._scram import (
        ScramCredentialInfo,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    alterations: list[Any] = []
    for mechanism, text in set_configs.items():
        iterations, password = _credential(mechanism, text)
        info = ScramCredentialInfo(_mechanism(mechanism), iterations)
        alterations.append(UserScramCredentialUpsertion(user, info, password.encode()))
    for mechanism in delete_configs:
        alterations.append(UserScramCredentialDeletion(user, _mechanism(mechanism)))
    futures = admin.alter_user_scram_credentials(alterations, request_timeout=timeout_s)
    try:
        futures[user].result(timeout=timeout_s)
    except Exception as e:
        raise CliError(f"cannot alter SCRAM credentials of user '{user}': {describe_kafka_exception(e)}") from None
    sys.stdout.write(f"Completed updating config for user {user}.\n")


def describe_users(admin: Any, user: str | None, timeout_s: float, as_json: bool) -> None:
    try:
        if user:
            described = {user: admin.describe_user_scram_credentials([user])[user].result(timeout=timeout_s)}
        else:
            described = admin.describe_user_scram_credentials(request_timeout=timeout_s).result(timeout=timeout_s)
    except Exception as e:
        raise CliError(f"cannot describe SCRAM credentials: {describe_kafka_exception(e)}") from None
    rows = {
        name: [(str(i.mechanism.name).replace("_", "-"), int(i.iterations)) for i in d.scram_credential_infos]
        for name, d in sorted(described.items())
    }
    if as_json:
        print_json({"users": [{"user": u, "credentials": [{"mechanism": m, "iterations": n} for m, n in creds]}
                              for u, creds in rows.items()]})  # fmt: skip
        return
    for name, creds in rows.items():
        listed = ", ".join(f"{m}=iterations={n}" for m, n in creds)
        sys.stdout.write(f"SCRAM credential configs for user-principal '{name}' are {listed}\n")


def check_user_args(args: argparse.Namespace, altering: bool) -> None:
    if altering and not args.entity_name:
        raise CliError("--entity-name is required to alter a user's credentials", EXIT_USAGE)
