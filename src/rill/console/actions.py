"""The console's changes. Each handler gets the posted form; without ``confirm=yes`` it answers the
confirmation page (for an offset reset: the dry run, every partition's offset now and after), with it it
makes the change and goes back to the page it came from. ``rill.console.app.action`` checks the identity,
the CSRF token and the write permission first, and audits what was done."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from rill.console import extras
from rill.console.app import Console, call, confirm, form_of
from rill.console.cluster import ConsoleError
from rill.console.messages import produce
from rill.console.sessions import Session


def _int(form: Any, name: str, low: int | None = None) -> int:
    try:
        value = int(str(form.get(name, "")).strip())
    except ValueError:
        raise ConsoleError(f"{name} must be a whole number") from None
    if low is not None and value < low:
        raise ConsoleError(f"{name} must be at least {low}")
    return value


def _pairs(text: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.replace(",", "\n").splitlines():
        if line.strip():
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise ConsoleError(f"{what}: {line.strip()!r} is not key=value")
            out[key.strip()] = value.strip()
    return out


def _back(path: str) -> Response:
    return RedirectResponse(path, status_code=303)


async def create_topic(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    name = str(form.get("name", "")).strip()
    partitions, replication = _int(form, "partitions", 1), _int(form, "replication", -1)
    configs = _pairs(str(form.get("configs", "")), "configs")
    if not name:
        raise ConsoleError("a topic needs a name")
    if form.get("confirm") != "yes":
        lines = [f"Create topic {name} with {partitions} partition(s), replication factor "
                 f"{'the default' if replication < 0 else replication}"] + [f"{k} = {v}" for k, v in configs.items()]
        return confirm(console, request, session, "Create topic", lines, form, danger=False)
    await call(console.cluster(session).create_topic, name, partitions, replication, configs)
    return _back(f"/topics/{quote(name, safe='')}")


async def delete_topic(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    name = request.path_params["name"]
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Delete topic", [f"Delete topic {name} and all its records"], form)
    await call(console.cluster(session).delete_topic, name)
    return _back("/topics")


async def add_partitions(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    name, total = request.path_params["name"], _int(form, "total", 1)
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Add partitions", [f"Give {name} {total} partitions in all"],
                       form)  # fmt: skip
    await call(console.cluster(session).add_partitions, name, total)
    return _back(f"/topics/{quote(name, safe='')}")


async def delete_records(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    name, partition, before = request.path_params["name"], _int(form, "partition", 0), _int(form, "before", 0)
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Delete records",
                       [f"Delete the records of {name}-{partition} before offset {before}"], form)  # fmt: skip
    await call(console.cluster(session).delete_records, name, partition, before)
    return _back(f"/topics/{quote(name, safe='')}")


async def alter_configs(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    name = request.path_params["name"]
    sets = _pairs(str(form.get("set", "")), "set")
    deletes = [d.strip() for d in str(form.get("delete", "")).replace(",", " ").split() if d.strip()]
    if not sets and not deletes:
        raise ConsoleError("nothing to change")
    cluster = console.cluster(session)
    if form.get("confirm") != "yes":
        await call(cluster.alter_topic_configs, name, sets, deletes, True)  # validated first: a refusal shows now
        lines = [f"set {k} = {v}" for k, v in sets.items()] + [f"remove {k} (back to the default)" for k in deletes]
        return confirm(console, request, session, f"Change the configs of {name}", lines, form, danger=False)
    await call(cluster.alter_topic_configs, name, sets, deletes, False)
    return _back(f"/topics/{quote(name, safe='')}")


async def produce_message(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    name = request.path_params["name"]
    key = str(form.get("key", "")) or None
    value = str(form.get("value", ""))
    headers = list(_pairs(str(form.get("headers", "")), "headers").items())
    raw_partition = str(form.get("partition", "")).strip()
    partition = _int(form, "partition", 0) if raw_partition else None
    if form.get("confirm") != "yes":
        lines = [f"Write to {name}" + (f" partition {partition}" if partition is not None else ""),
                 f"key: {key!r}", f"value: {value[:200]!r}"] + [f"header {k} = {v}" for k, v in headers]  # fmt: skip
        return confirm(console, request, session, "Produce a message", lines, form, danger=False)
    written = await call(produce, console.librdkafka(session), name, key, value, headers, partition)
    return _back(f"/topics/{quote(name, safe='')}/messages?start=offset&partition={written[0]}"
                 f"&position={written[1]}")  # fmt: skip


async def reset_offsets(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    group_id = request.path_params["group_id"]
    topic, to, value = str(form.get("topic", "")), str(form.get("to", "")), str(form.get("value", ""))
    cluster = console.cluster(session)
    plan = await call(cluster.reset_plan, group_id, topic, to, value)
    if form.get("confirm") != "yes":  # the dry run
        lines = [f"{topic}-{p}: {'none' if now < 0 else now} -> {new}" for p, (now, new) in plan.items()]
        return confirm(console, request, session, f"Reset the offsets of {group_id} ({to}): dry run", lines, form)
    await call(cluster.reset_offsets, group_id, topic, plan)
    return _back(f"/groups/{quote(group_id, safe='')}")


async def delete_group(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    group_id = request.path_params["group_id"]
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Delete group",
                       [f"Delete group {group_id} and its committed offsets"], form)  # fmt: skip
    await call(console.cluster(session).delete_group, group_id)
    return _back("/groups")


def _binding(console: Console, session: Session, form: dict[str, Any]) -> Any:
    return console.cluster(session).binding(
        str(form.get("resource_type", "")), str(form.get("resource_name", "")), str(form.get("pattern", "LITERAL")),
        str(form.get("principal", "")), str(form.get("host", "*")), str(form.get("operation", "")),
        str(form.get("permission", "ALLOW")),
    )  # fmt: skip


async def add_acl(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    binding = _binding(console, session, form)
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Add an ACL", [_describe_acl(binding)], form, danger=False)
    await call(console.cluster(session).create_acl, binding)
    return _back("/acls")


async def remove_acl(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    binding = _binding(console, session, form)
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Remove an ACL", [_describe_acl(binding)], form)
    await call(console.cluster(session).delete_acl, binding)
    return _back("/acls")


def _describe_acl(b: Any) -> str:
    return (f"{b.permission_type.name} {b.principal} from {b.host}: {b.operation.name} on "
            f"{b.restype.name} {b.name} ({b.resource_pattern_type.name})")  # fmt: skip


async def set_user(console: Console, request: Request, session: Session) -> Response:
    form = await form_of(request, session)
    user, mechanism = str(form.get("user", "")).strip(), str(form.get("mechanism", "SCRAM-SHA-512"))
    iterations = _int(form, "iterations", 4096)
    if not user or not form.get("password"):
        raise ConsoleError("a user needs a name and a password")
    if form.get("confirm") != "yes":
        line = f"{mechanism} credential for {user} ({iterations} iterations)"
        return confirm(console, request, session, "Set a SCRAM credential", [line], form, danger=False)
    await call(console.cluster(session).set_user, user, mechanism, str(form["password"]), iterations)
    return _back("/users")


async def delete_user(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    user, mechanism = str(form.get("user", "")), str(form.get("mechanism", ""))
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Delete a SCRAM credential", [f"{mechanism} of {user}"], form)
    await call(console.cluster(session).delete_user, user, mechanism)
    return _back("/users")


async def abort_transaction(console: Console, request: Request, session: Session) -> Response:
    form = dict(await request.form())
    topic, partition = str(form.get("topic", "")), _int(form, "partition", 0)
    pid, epoch, coord_epoch = _int(form, "producer_id"), _int(form, "producer_epoch"), _int(form, "coordinator_epoch")
    if form.get("confirm") != "yes":
        return confirm(console, request, session, "Abort a hanging transaction",
                       [f"Abort producer {pid} (epoch {epoch}) on {topic}-{partition}"], form)  # fmt: skip
    client = extras.rill_client(console.settings.bootstrap, session.props)
    try:
        await call(extras.abort_transaction, client, topic, partition, pid, epoch, coord_epoch)
    finally:
        client.close()
    return _back("/transactions")


ACTIONS = [
    ("/topics", create_topic, "create-topic"),
    ("/topics/{name}/delete", delete_topic, "delete-topic"),
    ("/topics/{name}/partitions", add_partitions, "add-partitions"),
    ("/topics/{name}/records", delete_records, "delete-records"),
    ("/topics/{name}/configs", alter_configs, "alter-configs"),
    ("/topics/{name}/messages", produce_message, "produce"),
    ("/groups/{group_id}/reset", reset_offsets, "reset-offsets"),
    ("/groups/{group_id}/delete", delete_group, "delete-group"),
    ("/acls", add_acl, "add-acl"),
    ("/acls/delete", remove_acl, "remove-acl"),
    ("/users", set_user, "set-scram-credential"),
    ("/users/delete", delete_user, "delete-scram-credential"),
    ("/transactions/abort", abort_transaction, "abort-transaction"),
]
