"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): users' SCRAM credentials (KIP-554).

Describe names each user's mechanisms and iteration counts (never salts or keys); all users when the request
names none; RESOURCE_NOT_FOUND for a user without credentials, DUPLICATE_RESOURCE for a user named twice.
Alter takes the client's salt and salted password (the password itself never travels) and stores the stored
and server keys derived from them. Every alteration is checked before anything is written: a user with a
refused alteration (an unknown mechanism, iterations outside 4096..16384, an empty name or salt, a deletion
of a credential that does not exist, the same user and mechanism twice) gets its error and changes nothing;
the other users' alterations are written together in one metadata change.
"""

from __future__ import annotations

from typing import Any

from rill.api.context import RequestContext
from rill.api.registry import handler
from rill.errors import ErrorCode
from rill.protocol import ApiKey
from rill.security.scram import (
    MECHANISM_NAMES,
    SCRAM_MECHANISMS,
    ScramCredential,
    credential_from_salted_password,
    iterations_problem,
)


@handler(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def describe_user_scram_credentials(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    store = ctx.services.metadata
    asked = [u["name"] for u in request.get("users") or []]
    users = asked or store.scram_users()
    seen: dict[str, int] = {}
    for user in asked:
        seen[user] = seen.get(user, 0) + 1
    results: list[dict[str, Any]] = []
    for user in dict.fromkeys(users):
        if seen.get(user, 0) > 1:
            results.append(_result(user, ErrorCode.DUPLICATE_RESOURCE,
                                   f"Cannot describe SCRAM credentials for the same user twice in a single request: "
                                   f"{user}"))  # fmt: skip
            continue
        creds = store.scram_credentials(user)
        if not creds:
            results.append(_result(user, ErrorCode.RESOURCE_NOT_FOUND,
                                   f"Attempt to describe a user credential that does not exist: {user}"))  # fmt: skip
            continue
        infos = [{"mechanism": SCRAM_MECHANISMS[m], "iterations": c.iterations} for m, c in sorted(creds.items())]
        results.append({"user": user, "error_code": 0, "error_message": None, "credential_infos": infos})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "results": results}


def _result(user: str, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


def _problem(
    ctx: RequestContext, user: str, mechanism: int, upsert: dict[str, Any] | None
) -> tuple[ErrorCode, str] | None:
    if not user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    name = MECHANISM_NAMES.get(mechanism)
    if name is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if upsert is None:
        if ctx.services.metadata.scram_credential(user, name) is None:
            return ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        return None
    problem = iterations_problem(name, int(upsert["iterations"]))
    if problem:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, problem
    if not upsert["salt"] or not upsert["salted_password"]:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


@handler(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(ctx: RequestContext, request: dict[str, Any]) -> dict[str, Any]:
    entries: list[tuple[str, int, dict[str, Any] | None]] = [
        (d["name"], int(d["mechanism"]), None) for d in request.get("deletions") or []
    ] + [(u["name"], int(u["mechanism"]), u) for u in request.get("upsertions") or []]
    errors: dict[str, tuple[ErrorCode, str]] = {}
    pairs: dict[tuple[str, int], int] = {}
    for user, mechanism, _ in entries:
        pairs[(user, mechanism)] = pairs.get((user, mechanism), 0) + 1
    for user, mechanism, upsert in entries:
        if user in errors:
            continue
        if pairs[(user, mechanism)] > 1:
            errors[user] = (
                ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request",
            )
            continue
        problem = _problem(ctx, user, mechanism, upsert)
        if problem is not None:
            errors[user] = problem
    changes: dict[str, dict[str, ScramCredential | None]] = {}
    for user, mechanism, upsert in entries:
        if user in errors:
            continue
        name = MECHANISM_NAMES[mechanism]
        cred = None if upsert is None else credential_from_salted_password(
            name, bytes(upsert["salt"]), bytes(upsert["salted_password"]), int(upsert["iterations"]))  # fmt: skip
        changes.setdefault(user, {})[name] = cred
    if changes:
        await ctx.services.metadata.alter_scram_credentials(changes)
    results = []
    for user in dict.fromkeys(u for u, _, _ in entries):
        code, message = errors.get(user, (ErrorCode.NONE, None))
        results.append({"user": user, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
