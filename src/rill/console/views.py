"""The console's pages: what they read from the cluster (through the request's identity) and which template
shows it. Each is ``async (console, request, session) -> Response``; blocking calls go through ``call``."""

from __future__ import annotations

import asyncio
import difflib
import json
import math
import urllib.parse
import urllib.request
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from rill.console import extras
from rill.console.app import Busy, Console, call, sign_in_call
from rill.console.cluster import ConsoleError, Unsupported
from rill.console.messages import Browse, Decoder, browse
from rill.console.sessions import SESSION_COOKIE, Session


async def overview(console: Console, request: Request, session: Session) -> Response:
    cluster = console.cluster(session)
    cluster_id, brokers, topics = await call(cluster.overview)
    live = {b.node_id for b in brokers}
    referenced = {r for t in topics for p in t.partitions for r in p.replicas}
    console.seen_brokers |= live | referenced
    down = sorted(console.seen_brokers - live)
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    return console.page(
        request, "overview.html", session, cluster_id=cluster_id, brokers=brokers, down=down,
        topics=len(topics), partitions=len(partitions),
        offline=[(n, p) for n, p in partitions if p.offline],
        under_replicated=[(n, p) for n, p in partitions if p.under_replicated and not p.offline],
        charts=bool(console.settings.metrics_urls),
    )  # fmt: skip


PAGE_SIZE = 200


async def _quietly(awaitable: Any) -> Any:
    """None when the cluster refuses (the page then says the figure is unknown)."""
    try:
        return await awaitable
    except ConsoleError:
        return None


def _sizes(console: Console, session: Session, topics: dict[str, int]) -> dict[str, int]:
    client = extras.rill_client(console.settings.bootstrap, session.props)
    try:
        return extras.topic_sizes(client, topics)
    finally:
        client.close()


def _summaries(console: Console, session: Session, names: list[str]) -> dict[str, dict[str, str]]:
    client = extras.rill_client(console.settings.bootstrap, session.props)
    try:
        return extras.topic_summaries(client, names, ["retention.ms", "cleanup.policy"])
    finally:
        client.close()


async def topics(console: Console, request: Request, session: Session) -> Response:
    cluster = console.cluster(session)
    found = await call(cluster.topics)
    q = request.query_params
    show_internal = q.get("internal") == "1"
    needle = q.get("filter", "").strip()
    matching = [t for t in found if (show_internal or not t.internal) and needle in t.name]
    pages = max(1, -(-len(matching) // PAGE_SIZE))
    page_no = min(max(int(q.get("page") or 1) if (q.get("page") or "1").isdigit() else 1, 1), pages)
    shown = matching[(page_no - 1) * PAGE_SIZE : page_no * PAGE_SIZE]
    names = [t.name for t in shown]
    sizes_task = asyncio.ensure_future(_quietly(call(_sizes, console, session, {t.name: len(t.partitions)
                                                                                 for t in shown})))  # fmt: skip
    configs_task = asyncio.ensure_future(_quietly(call(_summaries, console, session, names)))
    sizes, configs = await sizes_task, (await configs_task) or {}
    return console.page(request, "topics.html", session, topics=shown, sizes=sizes, configs=configs,
                        show_internal=show_internal, needle=needle, page_no=page_no, pages=pages,
                        total=len(matching))  # fmt: skip


async def topic(console: Console, request: Request, session: Session) -> Response:
    name = request.path_params["name"]
    cluster = console.cluster(session)
    info = await call(cluster.topic, name)
    lags: dict[str, dict[int, int]] = {}
    try:
        group_ids = [g.group_id for g in await call(cluster.groups)][:100]
        ends = {p.partition: p.end for p in info.partitions}
        for group_id, committed in (await call(cluster.committed_many, group_ids)).items():
            per = {p: ends.get(p, o) - o for (t, p), o in committed.items() if t == name}
            if per:
                lags[group_id] = per
    except ConsoleError:
        pass
    return console.page(request, "topic.html", session, topic=info, lags=lags)


async def messages(console: Console, request: Request, session: Session) -> Response:
    name = request.path_params["name"]
    q = request.query_params
    cluster = console.cluster(session)
    info = await call(cluster.topic, name)
    try:
        req = Browse(
            topic=name, partition=int(q["partition"]) if q.get("partition", "") not in ("", "all") else None,
            start=q.get("start", "newest"), position=int(q.get("position") or 0), limit=int(q.get("limit") or 50),
            key=q.get("key", ""), value=q.get("value", ""), header=q.get("header", ""),
        )  # fmt: skip
    except ValueError:
        raise ConsoleError("partition, position and limit are numbers") from None
    found, scanned = await call(browse, console.librdkafka(session), req,
                                [(p.partition, p.start, p.end) for p in info.partitions],
                                Decoder(console.settings.registry_url))  # fmt: skip
    return console.page(request, "messages.html", session, topic=info, request_=req, messages=found,
                        scanned=scanned)  # fmt: skip


async def groups(console: Console, request: Request, session: Session) -> Response:
    found = await call(console.cluster(session).groups)
    return console.page(request, "groups.html", session, groups=found)


async def group(console: Console, request: Request, session: Session) -> Response:
    group_id = request.path_params["group_id"]
    cluster = console.cluster(session)
    info = await call(cluster.group, group_id)

    def lag_source() -> dict[str, int]:
        return {f"{t}-{p}": lag for (t, p), (_, _, lag) in cluster.lag(group_id).items()}

    if info.state.upper() != "DEAD" or info.lag:  # a group id nobody uses is not watched
        await call(console.sampler.watch_lag, (session.sid, group_id), lag_source)
    return console.page(request, "group.html", session, group=info)


async def lag_history(console: Console, request: Request, session: Session) -> Response:
    history = console.sampler.lag_history((session.sid, request.path_params["group_id"]))
    series = sorted({k for _, lag in history for k in lag})
    return JSONResponse({"t": [t for t, _ in history], "series": {s: [lag.get(s) for _, lag in history]
                                                                   for s in series}})  # fmt: skip


async def metrics_history(console: Console, request: Request, session: Session) -> Response:
    points = console.sampler.history()
    return JSONResponse({"t": [p.t for p in points], "bytes_in": [p.bytes_in for p in points],
                         "bytes_out": [p.bytes_out for p in points], "requests": [p.requests for p in points],
                         "mean_request_ms": [p.mean_request_ms for p in points]})  # fmt: skip


async def acls(console: Console, request: Request, session: Session) -> Response:
    found = await call(console.cluster(session).acls)
    return console.page(request, "acls.html", session, acls=found)


async def users(console: Console, request: Request, session: Session) -> Response:
    found = await call(console.cluster(session).users)
    return console.page(request, "users.html", session, users=found)


async def quotas(console: Console, request: Request, session: Session) -> Response:
    client = extras.rill_client(console.settings.bootstrap, session.props)
    try:
        found = await call(extras.client_quotas, client)
    finally:
        client.close()
    return console.page(request, "quotas.html", session, quotas=found)


async def transactions(console: Console, request: Request, session: Session) -> Response:
    client = extras.rill_client(console.settings.bootstrap, session.props)
    try:
        found = await call(extras.transactions, client)
        hanging_ms = int(request.query_params.get("hanging_ms") or 0)
        hanging = await call(extras.hanging, client, hanging_ms) if hanging_ms > 0 else None
    finally:
        client.close()
    return console.page(request, "transactions.html", session, transactions=found, hanging=hanging,
                        hanging_ms=hanging_ms)  # fmt: skip


async def reassignments(console: Console, request: Request, session: Session) -> Response:
    client = extras.rill_client(console.settings.bootstrap, session.props)
    try:
        found = await call(extras.reassignments, client)
    finally:
        client.close()
    return console.page(request, "reassignments.html", session, reassignments=found)


def _registry(console: Console, path: str) -> Any:
    url = console.settings.registry_url
    if not url:
        raise Unsupported("no schema registry (start the console with --schema-registry URL)")
    try:
        with urllib.request.urlopen(url.rstrip("/") + path, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise ConsoleError(f"schema registry: {e.code} {e.read().decode('utf-8', 'replace')[:300]}") from None
    except OSError as e:
        raise ConsoleError(f"schema registry {url}: {e}") from None


async def schemas(console: Console, request: Request, session: Session) -> Response:
    subjects = await call(_registry, console, "/subjects")
    level = (await call(_registry, console, "/config")).get("compatibilityLevel")
    return console.page(request, "schemas.html", session, subjects=subjects, level=level)


async def schema(console: Console, request: Request, session: Session) -> Response:
    subject = request.path_params["subject"]
    quoted = urllib.parse.quote(subject, safe="")
    versions = await call(_registry, console, f"/subjects/{quoted}/versions")
    q = request.query_params
    chosen = int(q.get("version") or versions[-1])
    shown = await call(_registry, console, f"/subjects/{quoted}/versions/{chosen}")
    diff: list[str] = []
    against = q.get("diff")
    if against:
        other = await call(_registry, console, f"/subjects/{quoted}/versions/{int(against)}")
        diff = list(difflib.unified_diff(_pretty(other), _pretty(shown), f"version {against}", f"version {chosen}",
                                         lineterm=""))  # fmt: skip
    return console.page(request, "schema.html", session, subject=subject, versions=versions, shown=shown,
                        text="\n".join(_pretty(shown)), diff=diff, against=against)  # fmt: skip


def _pretty(version: dict[str, Any]) -> list[str]:
    text = str(version.get("schema", ""))
    if (version.get("schemaType") or "AVRO") in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(text), indent=2).splitlines()
        except ValueError:
            pass
    return text.splitlines()


def login_page(console: Console) -> Any:
    async def endpoint(request: Request) -> Response:
        if not console.settings.login:
            return RedirectResponse("/", status_code=303)
        error = None
        if request.method == "POST":
            form = await request.form()
            user, password = str(form.get("username", "")), str(form.get("password", ""))
            address = request.client.host if request.client is not None else ""
            wait = console.sign_in_limits.wait_s(address, user)
            if wait > 0:  # refused before the cluster is asked: guessing runs at the limits' pace
                retry = math.ceil(wait)
                response = console.page(request, "login.html", None, next=request.query_params.get("next", "/"),
                                        error=f"too many refused sign-ins: try again in {retry} s")  # fmt: skip
                response.status_code = 429
                response.headers["Retry-After"] = str(retry)
                return response
            props = {**console.settings.props, "sasl.mechanism": console.settings.login_mechanism,
                     "sasl.jaas.config": _jaas(console.settings.login_mechanism, user, password)}  # fmt: skip
            session = Session(user, props)
            try:
                await sign_in_call(console.cluster(session).overview)  # a refused login fails here
            except Busy:
                session.close()
                response = console.page(request, "login.html", None, next=request.query_params.get("next", "/"),
                                        error="too many sign-ins at once: try again in a moment")  # fmt: skip
                response.status_code = 503
                return response
            except ConsoleError as e:
                session.close()
                console.sign_in_limits.refused(address, user)
                error = f"cannot sign in as {user}: {e}"
            else:
                console.sign_in_limits.accepted(user)
                token = console.sessions.open(session)
                response = RedirectResponse(_local(str(form.get("next") or "/")), status_code=303)
                response.set_cookie(SESSION_COOKIE, token, httponly=True, samesite="strict",
                                    secure=console.settings.secure_cookies)  # fmt: skip
                return response
        return console.page(request, "login.html", None, error=error, next=request.query_params.get("next", "/"))

    return endpoint


def _local(target: str) -> str:
    """``target`` when it is a path of this console, else ``/``: ``//host``, ``/\\host`` and paths with control
    characters (browsers drop a tab or a line break, so ``/<tab>/host`` is ``//host``) lead elsewhere."""
    parts = urllib.parse.urlsplit(target)
    if (not target.startswith("/") or target.startswith(("//", "/\\")) or parts.scheme or parts.netloc
            or "\\" in target or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target)):  # fmt: skip
        return "/"
    return target


def _jaas(mechanism: str, user: str, password: str) -> str:
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")  # fmt: skip
    return f'{module} required username="{_quoted(user)}" password="{_quoted(password)}";'


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def logout(console: Console) -> Any:
    async def endpoint(request: Request) -> Response:
        closed = console.sessions.close(request.cookies.get(SESSION_COOKIE))
        if closed is not None:
            console.sampler.forget(closed.sid)
            closed.close()
        response = RedirectResponse("/login" if console.settings.login else "/", status_code=303)
        response.delete_cookie(SESSION_COOKIE)
        return response

    return endpoint


PAGES = [
    ("/", overview),
    ("/topics", topics),
    ("/topics/{name}", topic),
    ("/topics/{name}/messages", messages),
    ("/groups", groups),
    ("/groups/{group_id}", group),
    ("/api/lag/{group_id}", lag_history),
    ("/api/metrics", metrics_history),
    ("/acls", acls),
    ("/users", users),
    ("/quotas", quotas),
    ("/transactions", transactions),
    ("/reassignments", reassignments),
    ("/schemas", schemas),
    ("/schemas/{subject}", schema),
]
