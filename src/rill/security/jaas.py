"""The text of ``sasl.jaas.config``: login modules with their options, as Kafka's JaasConfig reads it.

    org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="s3cret"
        user_admin="s3cret" user_alice="alice-secret";

Each entry is a login module class, a control flag (required, requisite, sufficient, optional), options
``key=value`` (values quoted with double quotes, or bare words) and a closing ``;``. On a broker, the PLAIN
module's ``user_NAME="password"`` options are its users; ``username``/``password`` are what the broker itself
sends when it connects to another broker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = frozenset({"required", "requisite", "sufficient", "optional"})
_TOKEN = re.compile(r'\s*(?:(;)|(=)|"((?:[^"\\]|\\.)*)"|([^\s=;"]+))')


@dataclass(frozen=True, slots=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def users(self) -> dict[str, str]:
        """The ``user_NAME="password"`` options: name -> password."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_") and len(k) > 5}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"unexpected text at position {pos}: {text[pos : pos + 20]!r}")
        pos = m.end()
        if m.group(1):
            out.append((";", ";"))
        elif m.group(2):
            out.append(("=", "="))
        elif m.group(3) is not None:
            out.append(("str", re.sub(r"\\(.)", r"\1", m.group(3))))
        elif m.group(4):
            out.append(("word", m.group(4)))
        if not text[pos:].strip():
            break
    return out


def parse_jaas_config(text: str) -> list[LoginModule]:
    """The login modules of a ``sasl.jaas.config`` value; ValueError says what is wrong."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        if tokens[i][0] != "word" or i + 1 >= len(tokens) or tokens[i + 1][0] != "word":
            raise ValueError("a login module entry is: ClassName flag key=value ... ;")
        class_name, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in _FLAGS:
            raise ValueError(f"login module {class_name}: control flag {flag!r} is not one of {sorted(_FLAGS)}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=" or tokens[i + 2][0] == ";":
                raise ValueError(f"login module {class_name}: options are key=value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ValueError(f"login module {class_name}: the entry does not end with ';'")
        i += 1
        modules.append(LoginModule(class_name, flag, options))
    if not modules:
        raise ValueError("no login module given")
    return modules


def jaas_problem(text: str) -> str | None:
    """Why ``text`` is not a valid ``sasl.jaas.config`` (the config validator), or None."""
    try:
        parse_jaas_config(text)
    except ValueError as e:
        return str(e)
    return None


_COMMENTS = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/', re.DOTALL)
_SECTION = re.compile(r'\s*([A-Za-z_][\w.-]*)\s*\{((?:[^{}"]|"(?:[^"\\]|\\.)*")*)\}\s*;', re.DOTALL)


def jaas_file_section(text: str, name: str) -> list[LoginModule] | None:
    """The login modules of section ``name`` of a JAAS file (``Name { module flag options; ... };``, with
    ``//`` and ``/* */`` comments), or None when the file has no such section; ValueError says what is wrong."""
    text = _COMMENTS.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text)
    pos = 0
    found: list[LoginModule] | None = None
    while text[pos:].strip():
        m = _SECTION.match(text, pos)
        if m is None:
            raise ValueError(f"a JAAS file is a list of sections 'Name {{ ... }};' (unexpected text at {pos})")
        if m.group(1) == name:
            found = parse_jaas_config(m.group(2))
        pos = m.end()
    return found
