"""``rill console`` in a real browser (Debian's chromium driven by Playwright) against a three-broker cluster with
a SASL listener, ACLs, Prometheus endpoints and a schema registry: every page loads without a console error,
a topic is created, a message produced and found by key, a group's offsets reset (dry run first) and its lag
chart shows it, an ACL added hides a topic from a user who signs in after it, and a killed broker shows as
down with its partitions under-replicated. Screenshots of the main pages go to ``RILL_CONSOLE_SCREENSHOTS``
when it names a directory (docs/console holds the ones docs/CONSOLE.md shows)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from tests.cluster.test_security import _endpoint

from rill.testing.cluster import TestCluster, cluster
from rill.testing.registry import registry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')  # fmt: skip
OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:ANONYMOUS;User:admin",
    "num.partitions": 3,
}


@dataclass
class Env:
    cluster: TestCluster
    console: str  # the service console (PLAINTEXT, allowed to write)
    login_console: str  # the console people sign in to (SASL)
    registry: str
    sasl: str  # the cluster's SASL_PLAINTEXT bootstrap
    sasl_config: Path  # client properties of a console that signs people in over it


def _start_console(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "rill", "console", "--listen", "127.0.0.1:0",
                             "--sample-interval", "1", *args], stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("rill console ready on "), line
    return proc, line.split()[-1]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    if not os.path.exists(CHROMIUM):
        pytest.fail("chromium is missing: scripts/test.sh installs it (apt-get install chromium)")
    with cluster(brokers=3, overrides=OVERRIDES, metrics=True) as c:
        plain = c.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": plain})
        for f in admin.create_topics([NewTopic("public", 3, 3), NewTopic("secret", 1, 3)]).values():
            f.result(60)
        everything = AclBinding(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:alice", "*",
                                AclOperation.DESCRIBE, AclPermissionType.ALLOW)  # fmt: skip
        admin.create_acls([everything])[everything].result(30)
        sasl = ",".join(_endpoint(c, b, "SASL_PLAINTEXT") for b in c.brokers)
        config = tmp_path_factory.mktemp("console") / "sasl.properties"
        config.write_text("security.protocol=SASL_PLAINTEXT\n")
        metrics = [arg for b in c.brokers for arg in ("--metrics", f"http://127.0.0.1:{c.metrics_port(b)}/metrics")]
        with registry(plain) as reg:
            service, service_url = _start_console(["--bootstrap-server", plain, "--allow-writes", "--schema-registry",
                                                   reg.url, *metrics])  # fmt: skip
            login, login_url = _start_console(["--bootstrap-server", sasl, "--login", "--login-mechanism", "PLAIN",
                                               "--command-config", str(config)])  # fmt: skip
            try:
                yield Env(c, service_url, login_url, reg.url, sasl, config)
            finally:
                for proc in (service, login):
                    proc.terminate()
                    proc.wait(15)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield b
        b.close()


class Page:
    """A browser tab that fails the test on any console error or uncaught script error."""

    def __init__(self, browser: Any, base: str, **context: Any) -> None:
        self.context = browser.new_context(**context)
        self.page = self.context.new_page()
        self.base = base
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.set_default_timeout(20_000)

    def go(self, path: str) -> Any:
        response = self.page.goto(self.base + path)
        assert response is not None and response.ok, f"{path}: HTTP {response.status if response else '?'}"
        return self.page

    def confirm(self) -> None:
        self.page.click("#confirm")
        self.page.wait_for_load_state()

    def close(self) -> None:
        self.context.close()
        assert self.errors == [], self.errors


def _shots() -> Path | None:
    target = os.environ.get("RILL_CONSOLE_SCREENSHOTS")
    if not target:
        return None
    Path(target).mkdir(parents=True, exist_ok=True)
    return Path(target)


def _group_with_lag(bootstrap: str, topic: str, group: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)]
    consumer.commit(offsets=[TopicPartition(topic, p, ends[p]) for p in range(3)], asynchronous=False)
    consumer.close()


def test_every_page_loads_and_works_on_phone_and_wide_screens(env: Env, browser: Any) -> None:
    _group_with_lag(env.cluster.bootstrap_servers, "public", "viewers", 30)
    shots = _shots()
    paths = ["/", "/topics", "/topics/public", "/topics/public/messages", "/groups", "/groups/viewers",
             "/transactions", "/acls", "/users", "/quotas", "/schemas", "/reassignments"]  # fmt: skip
    for viewport, theme in (({"width": 1400, "height": 900}, "light"), ({"width": 390, "height": 844}, "dark")):
        tab = Page(browser, env.console, viewport=viewport, color_scheme=theme)
        for path in paths:
            page = tab.go(path)
            assert page.locator("h1").count() == 1, path
            # nothing wider than the screen: wide tables scroll inside their own box
            assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"] + 1, path
            if shots is not None and path in ("/", "/topics", "/topics/public", "/groups/viewers", "/acls"):
                page.wait_for_timeout(1500 if path in ("/", "/groups/viewers") else 100)  # charts draw
                name = (path.strip("/").replace("/", "-") or "overview") + ("-phone" if viewport["width"] < 500 else "")
                page.screenshot(path=str(shots / f"{name}.png"), full_page=viewport["width"] > 500)
        page = tab.go("/")
        page.keyboard.press("Tab")  # the skip link, then the sections: reachable from the keyboard
        page.keyboard.press("Tab")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        page.wait_for_load_state()
        assert page.url.endswith("/topics") or page.url.endswith("/"), page.url
        tab.close()


def test_create_a_topic_produce_and_find_a_message_by_key(env: Env, browser: Any) -> None:
    tab = Page(browser, env.console)
    page = tab.go("/topics")
    page.fill("#create-topic input[name=name]", "made-in-browser")
    page.fill("#create-topic input[name=partitions]", "2")
    page.fill("#create-topic textarea[name=configs]", "retention.ms=3600000")
    page.click("#create-topic button[type=submit]")
    assert "made-in-browser with 2 partition(s)" in page.inner_text("ul.plan")
    tab.confirm()
    assert page.url.endswith("/topics/made-in-browser")
    assert page.locator("#partitions tbody tr").count() == 2
    assert "3600000" in page.inner_text("#configs")
    page = tab.go("/topics/made-in-browser/messages")
    page.fill("#produce input[name=key]", "order-42")
    page.fill("#produce textarea[name=value]", '{"total": 42}')
    page.fill("#produce textarea[name=headers]", "source=browser")
    page.click("#produce button[type=submit]")
    tab.confirm()
    producer = Producer({"bootstrap.servers": env.cluster.bootstrap_servers})
    for i in range(20):  # others beside it, so the filter has something to leave out
        producer.produce("made-in-browser", key=f"other-{i}".encode(), value=b"{}")
    assert producer.flush(30) == 0
    page = tab.go("/topics/made-in-browser/messages?start=oldest&key=order-42")
    rows = page.locator("#messages tbody tr")
    assert rows.count() == 1
    text = rows.first.inner_text()
    assert "order-42" in text and '"total": 42' in text and "source=browser" in text
    tab.close()


def test_reset_a_group_s_offsets_with_a_dry_run_and_see_the_lag(env: Env, browser: Any) -> None:
    _group_with_lag(env.cluster.bootstrap_servers, "public", "resetters", 30)
    tab = Page(browser, env.console)
    page = tab.go("/groups/resetters")
    assert page.inner_text("#total-lag") == "0"
    page.fill("#reset input[name=topic]", "public")
    page.select_option("#reset select[name=to]", "earliest")
    page.click("#reset button[type=submit]")
    plan = page.inner_text("ul.plan")
    assert "dry run" in page.inner_text("h1") and "public-0" in plan and "-> 0" in plan
    page = tab.go("/groups/resetters")
    assert page.inner_text("#total-lag") == "0"  # the dry run changed nothing
    page.fill("#reset input[name=topic]", "public")
    page.select_option("#reset select[name=to]", "earliest")
    page.click("#reset button[type=submit]")
    tab.confirm()
    assert page.url.endswith("/groups/resetters")
    total = int(page.inner_text("#total-lag"))
    assert total >= 60  # both groups' records: the offsets went back to the start
    deadline = time.monotonic() + 20
    while True:  # the chart's samples: before (0) and after (the full lag)
        with urllib.request.urlopen(env.console + "/api/lag/resetters", timeout=10) as r:
            history = json.loads(r.read())
        totals = [sum(v or 0 for v in values) for values in zip(*history["series"].values(), strict=False)]
        if 0 in totals and totals and totals[-1] == total:
            break
        assert time.monotonic() < deadline, history
        time.sleep(0.5)
    page.reload()
    page.wait_for_selector("#lag-chart[data-points]")
    assert int(page.get_attribute("#lag-chart", "data-points") or 0) >= 2
    tab.close()


def _sign_in(browser: Any, base: str, user: str, password: str) -> Page:
    tab = Page(browser, base)
    page = tab.page
    page.goto(base + "/topics")
    assert page.url.startswith(base + "/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    return tab


def test_an_acl_added_hides_a_topic_from_a_user_who_signs_in_after(env: Env, browser: Any) -> None:
    alice = _sign_in(browser, env.login_console, "alice", "alice-secret")
    names = alice.page.locator("#topics tbody td:first-child").all_inner_texts()
    assert "secret" in names and "public" in names
    alice.close()
    wrong = Page(browser, env.login_console)
    wrong.page.goto(env.login_console + "/login")
    wrong.page.fill("input[name=username]", "alice")
    wrong.page.fill("input[name=password]", "nope")
    wrong.page.click("button[type=submit]")
    assert "cannot sign in as alice" in wrong.page.inner_text(".error")
    wrong.errors.clear()
    wrong.close()

    admin = _sign_in(browser, env.login_console, "admin", "admin-secret")
    page = admin.go("/acls")
    page.fill("#add-acl input[name=principal]", "User:alice")
    page.select_option("#add-acl select[name=permission]", "DENY")
    page.select_option("#add-acl select[name=operation]", "DESCRIBE")
    page.select_option("#add-acl select[name=resource_type]", "TOPIC")
    page.fill("#add-acl input[name=resource_name]", "secret")
    page.click("#add-acl button[type=submit]")
    assert "DENY User:alice" in page.inner_text("ul.plan")
    admin.confirm()
    assert "DENY" in page.inner_text("#acls")
    admin.close()

    alice = _sign_in(browser, env.login_console, "alice", "alice-secret")
    names = alice.page.locator("#topics tbody td:first-child").all_inner_texts()
    assert "public" in names and "secret" not in names
    page = alice.go("/acls")  # alice may not describe ACLs: the page says so, it does not break
    assert "cannot" in page.inner_text("main").lower() or page.locator("#acls").count() == 1
    alice.errors = [e for e in alice.errors if "502" not in e]
    alice.close()


def test_a_killed_broker_shows_as_down_with_under_replicated_partitions(env: Env, browser: Any) -> None:
    tab = Page(browser, env.console)
    page = tab.go("/")
    assert page.locator("#brokers tbody tr").count() == 3
    victim = env.cluster.brokers[-1]
    started = time.monotonic()
    env.cluster.kill(victim)
    while True:
        page = tab.go("/")
        if page.locator("#down-count").count() and int(page.inner_text("#urp-count")) > 0:
            break
        assert time.monotonic() - started < 30, page.inner_text("main")
        time.sleep(0.5)
    seen = time.monotonic() - started
    assert "down" in page.inner_text("#brokers") and seen < 30
    assert page.locator("#attention tbody tr").count() > 0
    tab.close()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def _http_sign_in(base: str, user: str, password: str, next_: str = "/") -> tuple[int, str, str]:
    """Status, Location and session cookie of a sign-in posted as a form (raw HTTP, no redirects followed)."""
    opener = urllib.request.build_opener(_NoRedirect)
    data = urllib.parse.urlencode({"username": user, "password": password, "next": next_}).encode()
    try:
        with opener.open(urllib.request.Request(base + "/login", data=data), timeout=60) as r:
            return r.status, r.headers.get("Location", ""), ""
    except urllib.error.HTTPError as e:
        cookie = (e.headers.get("Set-Cookie") or "").split(";")[0]
        return e.code, e.headers.get("Location", ""), cookie


def _get_json(base: str, path: str, cookie: str) -> tuple[int, Any]:
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(base + path, headers={"Cookie": cookie}), timeout=60) as r:
            body = r.read()
            return r.status, json.loads(body) if path.startswith("/api/") else body.decode()
    except urllib.error.HTTPError as e:
        return e.code, None


def test_sign_in_goes_back_only_to_a_page_of_the_console(env: Env) -> None:
    for target in ("//evil.example/x", "/\\evil.example/x", "https://evil.example/", "/\t/evil.example"):
        status, location, cookie = _http_sign_in(env.login_console, "alice", "alice-secret", target)
        assert status == 303 and cookie, (target, status)
        assert location == "/", (target, location)
    status, location, _ = _http_sign_in(env.login_console, "alice", "alice-secret", "/topics/public?x=1")
    assert (status, location) == (303, "/topics/public?x=1")


def test_a_group_s_lag_history_is_only_shown_to_who_may_see_the_group(env: Env) -> None:
    _group_with_lag(env.cluster.bootstrap_servers, "public", "payroll", 5)
    _, _, admin = _http_sign_in(env.login_console, "admin", "admin-secret")
    _, _, alice = _http_sign_in(env.login_console, "alice", "alice-secret")
    assert admin and alice
    status, _ = _get_json(env.login_console, "/groups/payroll", admin)  # admin views it: sampled as admin
    assert status == 200
    status, history = _get_json(env.login_console, "/api/lag/payroll", admin)
    assert status == 200 and history["t"], history
    # alice may not describe the group: its page refuses her, and so must its history
    status, history = _get_json(env.login_console, "/api/lag/payroll", alice)
    assert status != 200 or not history["t"], history
    # a group nobody uses is not sampled (any id in the URL would otherwise be watched, and kept, for good)
    status, _ = _get_json(env.login_console, "/groups/nobody-uses-this-group", admin)
    status, history = _get_json(env.login_console, "/api/lag/nobody-uses-this-group", admin)
    assert status != 200 or not history["t"], history


def _zigzag(n: int) -> bytes:
    n, out = (n << 1) ^ (n >> 63), bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes([*out, n])


def test_hostile_records_do_not_stop_a_topic_s_messages_from_showing(env: Env) -> None:
    bootstrap = env.cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("hostile", 1, 1)])["hostile"].result(60)
    schema = json.dumps({"schema": json.dumps({"type": "array", "items": "null"})}).encode()
    request = urllib.request.Request(env.registry + "/subjects/hostile-value/versions", method="POST", data=schema,
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as r:
        schema_id = json.loads(r.read())["id"]
    producer = Producer({"bootstrap.servers": bootstrap})
    # ten bytes saying "five million nulls": Avro spends no byte on a null, so nothing bounds the count
    producer.produce("hostile", value=b"\0" + schema_id.to_bytes(4, "big") + _zigzag(5_000_000) + _zigzag(0))
    producer.produce("hostile", value=b"[" * 100_000 + b"]" * 100_000)  # JSON nested past Python's recursion limit
    producer.produce("hostile", value=bytes(range(256)) * 3000)  # 768 KB of binary, shown as hex
    assert producer.flush(30) == 0
    started = time.monotonic()
    status, page = _get_json(env.console, "/topics/hostile/messages?start=oldest&limit=50", "")
    took = time.monotonic() - started
    assert status == 200, page
    assert len(page) < 1_000_000, f"a page of {len(page)} characters"
    assert took < 30, f"{took:.1f} s"
    assert page.count("<tr>") == 4, page[-3000:]  # the header and each record, shown
    assert "not decoded: items that take no byte" in page and "more bytes not shown" in page


def test_a_console_on_a_loopback_address_answers_only_loopback_host_names(env: Env) -> None:
    """DNS rebinding: a page of another site whose name the attacker points at 127.0.0.1 reaches the console
    with its own name in Host, and would read the pages (and their form tokens) as the same origin."""
    import http.client

    port = urllib.parse.urlsplit(env.console).port
    for host, expected in ((f"rebind.evil.example:{port}", 400), (f"127.0.0.1:{port}", 200),
                           (f"localhost:{port}", 200)):  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("GET", "/topics", headers={"Host": host})
            status = conn.getresponse().status
        finally:
            conn.close()
        assert status == expected, (host, status)



def test_refused_sign_ins_cannot_hold_the_console_up(env: Env) -> None:
    """A refused sign-in waits for the cluster's answer (seconds): many sent at once, by anyone (no session is
    needed), must not take every worker thread from the console's other requests."""
    import threading

    attempts = [threading.Thread(target=_http_sign_in, args=(env.login_console, "alice", f"wrong-{i}"))
                for i in range(48)]  # fmt: skip
    for attempt in attempts:
        attempt.start()
    try:
        time.sleep(1)  # the attempts are in (each one takes seconds to be refused)
        started = time.monotonic()
        with urllib.request.urlopen(env.login_console + "/static/console.css", timeout=60) as r:
            assert r.status == 200
        took = time.monotonic() - started
        assert took < 3, f"a static file took {took:.1f} s while sign-ins were refused"
    finally:
        for attempt in attempts:
            attempt.join(120)


def _sign_in_status(base: str, user: str, password: str, context: Any = None) -> tuple[int, str, str]:
    """Status, Retry-After and Set-Cookie of a sign-in (raw HTTP, no redirects followed)."""
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=context))
    data = urllib.parse.urlencode({"username": user, "password": password, "next": "/"}).encode()
    try:
        with opener.open(urllib.request.Request(base + "/login", data=data), timeout=60) as r:
            return r.status, "", ""
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After", ""), e.headers.get("Set-Cookie") or ""


def test_refused_sign_ins_slow_down_whoever_guesses(env: Env) -> None:
    """Each guess costs the cluster a SASL exchange and nothing else bounded them: guesses at one user's
    password wait longer and longer, and one address gets a window's worth of guesses."""
    proc, base = _start_console(["--bootstrap-server", env.sasl, "--login", "--login-mechanism", "PLAIN",
                                 "--command-config", str(env.sasl_config)])  # fmt: skip
    try:
        for i in range(6):  # five refusals in a row are free, the sixth sets a wait
            status, _, _ = _sign_in_status(base, "alice", f"guess-{i}")
            assert status == 200, (i, status)  # the sign-in page again, with its error
        status, retry, _ = _sign_in_status(base, "alice", "alice-secret")  # even the right password waits
        assert status == 429 and int(retry) >= 1, (status, retry)
        status, _, cookie = _sign_in_status(base, "admin", "admin-secret")  # another user is not held
        assert status == 303 and cookie, status
        for i in range(4):  # ten refusals from this address in all
            _sign_in_status(base, f"nobody-{i}", "guess")
        status, retry, _ = _sign_in_status(base, "admin", "admin-secret")
        assert status == 429 and int(retry) > 60, (status, retry)
    finally:
        proc.terminate()
        proc.wait(15)


def test_a_password_set_in_the_console_is_not_written_into_its_confirmation_page(env: Env) -> None:
    import re

    opener = urllib.request.build_opener()
    with opener.open(env.console + "/users", timeout=60) as r:
        csrf = re.search(r'name="csrf" value="([^"]+)"', r.read().decode())
    assert csrf is not None
    password = "a-password-nobody-should-see-17"
    form = {"csrf": csrf.group(1), "user": "carol", "password": password, "mechanism": "SCRAM-SHA-256",
            "iterations": "8192"}  # fmt: skip
    with opener.open(urllib.request.Request(env.console + "/users", data=urllib.parse.urlencode(form).encode()),
                     timeout=60) as r:  # fmt: skip
        page = r.read().decode()
    assert "Set a SCRAM credential" in page and password not in page, page
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page))
    assert fields.get("confirm") == "yes" and "pending" in fields, fields
    with opener.open(urllib.request.Request(env.console + "/users", data=urllib.parse.urlencode(fields).encode()),
                     timeout=60) as r:  # fmt: skip
        assert r.status == 200
    admin = AdminClient({"bootstrap.servers": env.cluster.bootstrap_servers})
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(30)
    assert [c.mechanism.name for c in described.scram_credential_infos] == ["SCRAM_SHA_256"], described
    # the reference is spent: the same confirmation sent again has no password to set, and is refused
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(urllib.request.Request(env.console + "/users", data=urllib.parse.urlencode(fields).encode()),
                    timeout=60)  # fmt: skip
    assert refused.value.code == 400
    assert "a user needs a name and a password" in refused.value.read().decode()


def test_a_console_serving_https_sends_its_session_cookie_over_https_only(env: Env, tmp_path: Path) -> None:
    import ssl

    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out",
                    "cert.pem", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   cwd=tmp_path, check=True, capture_output=True, timeout=60)  # fmt: skip
    proc, base = _start_console(["--bootstrap-server", env.sasl, "--login", "--login-mechanism", "PLAIN",
                                 "--command-config", str(env.sasl_config), "--ssl-certfile",
                                 str(tmp_path / "cert.pem"), "--ssl-keyfile", str(tmp_path / "key.pem")])  # fmt: skip
    try:
        assert base.startswith("https://"), base
        context = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
        status, _, cookie = _sign_in_status(base, "alice", "alice-secret", context)
        assert status == 303 and cookie, status
        attributes = [a.strip().lower() for a in cookie.split(";")]
        assert "secure" in attributes and "httponly" in attributes, cookie
    finally:
        proc.terminate()
        proc.wait(15)
