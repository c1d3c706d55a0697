"""The console's web application (Starlette, server-rendered Jinja2 templates, a little JavaScript for charts,
confirmations and the theme). Pages are in :mod:`rill.console.views`, changes in :mod:`rill.console.actions`;
this module holds the settings, the identity of each request, and the responses they share.

Every blocking cluster call runs in a worker thread (``call``), so one slow broker never holds the others'
pages. Every change is confirmed on a page of its own first and then written to the ``rill.console.audit``
log: who, what, and whether the cluster took it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from rill.console.cluster import ConsoleCluster, ConsoleError, Unsupported
from rill.console.sampler import Sampler
from rill.console.sessions import SESSION_COOKIE, Session, Sessions
from rill.console.sign_in_limits import SignInLimits

audit = logging.getLogger("rill.console.audit")
HERE = Path(__file__).parent
MAX_BODY_BYTES = 2 << 20  # a produced message's form, at most
SECRET_FIELDS = ("password",)  # form fields never written into a page nor into the audit log


@dataclass
class Settings:
    bootstrap: str
    props: dict[str, Any] = field(default_factory=dict)  # the service identity's client properties
    allow_writes: bool = False
    login: bool = False  # each person signs in with their SASL user (props give the protocol and TLS)
    login_mechanism: str = "SCRAM-SHA-512"
    metrics_urls: list[str] = field(default_factory=list)
    registry_url: str | None = None
    interval_s: float = 5.0
    # the names the console answers to (the Host header); None: any. A console on a loopback address answers
    # only loopback names, so a site whose name is pointed at 127.0.0.1 (DNS rebinding) gets nothing
    allowed_hosts: list[str] | None = None
    # the session cookie is sent over HTTPS only (the console serves HTTPS, or sits behind a proxy that does)
    secure_cookies: bool = False


class Console:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = Sessions()
        self.sign_in_limits = SignInLimits()
        self.sampler = Sampler(settings.metrics_urls, settings.interval_s)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["human_bytes"] = human_bytes
        self.templates.env.globals["urlencode"] = urlencode
        self.seen_brokers: set[int] = set()
        self.service: Session | None = None if settings.login else Session("service", dict(settings.props))

    # -- identity ----------------------------------------------------------------------------------------

    def session(self, request: Request) -> Session | None:
        if self.service is not None:
            return self.service
        return self.sessions.get(request.cookies.get(SESSION_COOKIE))

    def cluster(self, session: Session) -> ConsoleCluster:
        if session.cluster is None:
            from rill.cli._client_security import librdkafka_security

            config = librdkafka_security({"bootstrap.servers": self.settings.bootstrap, **session.props})
            session.cluster = ConsoleCluster(config)
        return session.cluster

    def librdkafka(self, session: Session) -> dict[str, Any]:
        return self.cluster(session).config

    def may_write(self, session: Session) -> bool:
        return self.settings.login or self.settings.allow_writes

    # -- responses ---------------------------------------------------------------------------------------

    def page(self, request: Request, template: str, session: Session | None, **context: Any) -> Response:
        nav = [("/", "Overview"), ("/topics", "Topics"), ("/groups", "Groups"), ("/transactions", "Transactions"),
               ("/acls", "ACLs"), ("/users", "Users"), ("/quotas", "Quotas"), ("/schemas", "Schemas"),
               ("/reassignments", "Reassignments")]  # fmt: skip
        base = {"nav": nav, "session": session, "path": request.url.path, "settings": self.settings,
                "writable": session is not None and self.may_write(session)}  # fmt: skip
        return self.templates.TemplateResponse(request, template, {**base, **context})

    def error(self, request: Request, session: Session | None, message: str, status: int = 502) -> Response:
        response = self.page(request, "error.html", session, message=message)
        response.status_code = status
        return response


LOOPBACK_NAMES = ["localhost", "127.0.0.1", "::1", "[::1]"]


def allowed_hosts(listen_host: str, extra: list[str]) -> list[str] | None:
    """The Host names a console listening on ``listen_host`` answers: loopback names (and ``extra``) on a
    loopback address; ``extra`` only when given; any otherwise."""
    import ipaddress

    try:
        loopback = listen_host == "localhost" or ipaddress.ip_address(listen_host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if loopback:
        return LOOPBACK_NAMES + extra
    return list(extra) or None


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


CLUSTER_THREADS = 32  # cluster calls at once; the worker threads beyond them stay for the rest (static files)
SIGN_IN_THREADS = 4  # sign-ins being checked at once: anyone may send one, and a refusal takes seconds
_limiters: dict[str, anyio.CapacityLimiter] = {}


def _limiter(name: str, tokens: int) -> anyio.CapacityLimiter:
    found = _limiters.get(name)
    if found is None:  # made on the event loop, at its first use
        found = _limiters[name] = anyio.CapacityLimiter(tokens)
    return found


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A blocking cluster call in a worker thread (at most ``CLUSTER_THREADS`` at once)."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs),
                                          limiter=_limiter("cluster", CLUSTER_THREADS))  # fmt: skip


class Busy(Exception):
    """As many sign-ins as ``SIGN_IN_THREADS`` are being checked already."""


async def sign_in_call(fn: Callable[..., Any], *args: Any) -> Any:
    """A sign-in's check against the cluster: refused at once (``Busy``) when ``SIGN_IN_THREADS`` are being
    checked, so that requests anyone may send never wait in line for, nor take, the worker threads."""
    turns = _limiter("sign-in", SIGN_IN_THREADS)
    try:
        turns.acquire_nowait()
    except anyio.WouldBlock:
        raise Busy from None
    try:  # threads of their own: the turn taken above bounds them
        return await anyio.to_thread.run_sync(functools.partial(fn, *args),
                                              limiter=_limiter("sign-in-threads", SIGN_IN_THREADS))  # fmt: skip
    finally:
        turns.release()


Handler = Callable[[Console, Request, Session], Awaitable[Response]]


def view(console: Console, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A page that needs an identity: the login page without one; cluster errors as an error page."""

    async def endpoint(request: Request) -> Response:
        session = console.session(request)
        if session is None:
            return RedirectResponse("/login?" + urlencode({"next": request.url.path}), status_code=303)
        try:
            return await handler(console, request, session)
        except Unsupported as e:
            return console.error(request, session, f"{e} (this page needs what the cluster does not offer)", 200)
        except ConsoleError as e:
            return console.error(request, session, str(e))

    return endpoint


def action(console: Console, handler: Handler, what: str) -> Callable[[Request], Awaitable[Response]]:
    """A change: needs an identity allowed to write and the session's CSRF token; audited."""

    async def endpoint(request: Request) -> Response:
        session = console.session(request)
        if session is None:
            return RedirectResponse("/login", status_code=303)
        form = await request.form()
        if form.get("csrf") != session.csrf:
            return console.error(request, session, "the form is stale or was not sent by this console", 403)
        if not console.may_write(session):
            return console.error(request, session, "this console is read-only (start it with --allow-writes)", 403)
        try:
            response = await handler(console, request, session)
        except ConsoleError as e:
            if form.get("confirm") == "yes":
                audit.warning("user=%s action=%s refused: %s", session.user, what, e)
            return console.error(request, session, str(e), 400)
        if form.get("confirm") == "yes":
            hidden = ("csrf", "confirm", "pending", *SECRET_FIELDS)
            details = " ".join(f"{k}={v!r}" for k, v in form.items() if k not in hidden)
            audit.info("user=%s action=%s %s", session.user, what, details)
        return response

    return endpoint


def confirm(console: Console, request: Request, session: Session, title: str, lines: list[str],
            form: dict[str, Any], danger: bool = True) -> Response:  # fmt: skip
    """The confirmation page of a change: the same form again with ``confirm=yes``. A secret (a password) is
    not written into the page: the session keeps it, and the page carries a one-use reference to it."""
    fields = {k: v for k, v in form.items() if k not in ("confirm", "csrf", "pending", *SECRET_FIELDS)}
    secret = {k: str(form[k]) for k in SECRET_FIELDS if k in form}
    if secret:
        fields["pending"] = session.stash_secrets(secret)
    return console.page(request, "confirm.html", session, title=title, lines=lines, fields=fields,
                        target=request.url.path, danger=danger)  # fmt: skip


async def form_of(request: Request, session: Session) -> dict[str, Any]:
    """A change's form, with the secrets its confirmation page referred to (``confirm``) put back."""
    form = dict(await request.form())
    ref = form.pop("pending", None)
    if ref is not None:
        form.update(session.take_secrets(str(ref)))
    return form


def create_app(settings: Settings) -> Starlette:
    from rill.console import actions, views

    console = Console(settings)
    routes = [
        Route("/login", views.login_page(console), methods=["GET", "POST"]),
        Route("/logout", views.logout(console), methods=["POST"]),
        *[Route(path, view(console, fn)) for path, fn in views.PAGES],
        *[Route(path, action(console, fn, what), methods=["POST"]) for path, fn, what in actions.ACTIONS],
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return HTMLResponse("<h1>Not found</h1>", status_code=404)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        console.sampler.start()
        try:
            yield
        finally:
            console.sampler.stop()

    middleware = []
    if settings.allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=settings.allowed_hosts,
                                     www_redirect=False))  # fmt: skip
    app = Starlette(routes=routes, exception_handlers={404: not_found}, lifespan=lifespan,
                    max_body_size=MAX_BODY_BYTES, middleware=middleware)  # fmt: skip
    app.state.console = console
    return app
