"""Java-properties files (Kafka's ``server.properties``) and cluster ids."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Iterable
from pathlib import Path

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> Iterable[str]:
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if pending else raw
        if not pending and (not line.strip() or line.lstrip()[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        yield (pending + line).lstrip()
        pending = ""
    if pending:
        yield pending.lstrip()


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text: comments (# !), ``key=value``, ``key: value``, ``key value``, escapes."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\":
                i += 2
                continue
            if ch in "=: \t\f":
                break
            i += 1
        key, rest = line[:i], line[i:]
        rest = rest.lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        props[_unescape(key)] = _unescape(rest)
    return props


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a Kafka-style ``server.properties`` file (ISO-8859-1 as Java would, UTF-8 when valid)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text)


def ensure_cluster_id(explicit: str | None = None) -> str:
    """A new cluster id in Kafka's form (a base64url UUID without padding), or ``explicit``."""
    if explicit:
        return explicit
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
