"""``ssl.principal.mapping.rules``: from a client certificate's subject DN to the principal's name, with Kafka's
rule syntax.

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT

Rules are tried in order; the first whose pattern matches the whole DN gives the name: the DN with the pattern
replaced by the replacement (``$n`` is the n-th group), then lower-cased (``/L``) or upper-cased (``/U``).
``DEFAULT`` gives the DN itself. A DN no rule matches cannot be a principal: its connection is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class NoMatchingRule(ValueError):
    """No rule applies to the DN."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(lambda m: _expand(self.replacement, m), dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def _expand(replacement: str, m: re.Match[str]) -> str:
    """Java's replacement syntax: ``$n`` a group (a reference past the last group is taken literally, digits
    dropped from its end first, as Kafka does), ``\\x`` the character x."""
    out: list[str] = []
    i = 0
    groups = len(m.groups())
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        if ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            digits = replacement[i + 1 : j]
            while len(digits) > 1 and int(digits) > groups:
                digits = digits[:-1]
            if int(digits) <= groups:
                out.append(m.group(int(digits)) or "")
                i += 1 + len(digits)
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _until_slash(text: str, pos: int) -> tuple[str, int]:
    """The text from ``pos`` up to the next unescaped ``/`` (kept as written), and the position of that slash."""
    i = pos
    while i < len(text) and text[i] != "/":
        i += 2 if text[i] == "\\" else 1
    if i >= len(text):
        raise ValueError(f"rule {text!r} is not RULE:pattern/replacement/[LU]")
    return text[pos:i], i


def parse_rules(text: str) -> list[_Rule]:
    """The rules of ``ssl.principal.mapping.rules``; ValueError names a bad one."""
    rules: list[_Rule] = []
    rest = text.strip()
    while rest:
        if rest.startswith("DEFAULT"):
            rules.append(_Rule(None))
            rest = rest[len("DEFAULT") :]
        elif rest.startswith("RULE:"):
            pattern, end = _until_slash(rest, len("RULE:"))
            replacement, end = _until_slash(rest, end + 1)
            rest = rest[end + 1 :]
            case = rest[:1] if rest[:1] in ("L", "U") else ""
            rest = rest[len(case) :]
            try:
                rules.append(_Rule(re.compile(pattern), replacement, case))
            except re.error as e:
                raise ValueError(f"rule pattern {pattern!r}: {e}") from None
        else:
            raise ValueError(f"invalid rule: {rest.split(',')[0]!r} (expected DEFAULT or RULE:pattern/replacement/)")
        rest = rest.lstrip()
        if rest and not rest.startswith(","):
            raise ValueError(f"invalid rule: unmatched text {rest.split(',')[0]!r}")
        rest = rest[1:].lstrip()
    return rules


class SslPrincipalMapper:
    def __init__(self, text: str = "DEFAULT") -> None:
        self.rules = parse_rules(text)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"no rule of ssl.principal.mapping.rules applies to {dn}")


def rules_problem(text: str) -> str | None:
    """Why ``text`` is not valid ``ssl.principal.mapping.rules`` (the config validator), or None."""
    try:
        parse_rules(text)
    except ValueError as e:
        return str(e)
    return None
