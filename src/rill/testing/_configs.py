"""Config names as tests write them: ``{"num.partitions": 3}`` or ``num_partitions=3``.

Keywords stand for dotted names (``_`` for ``.``); values become the text a server.properties file
would hold. A name that is not one of the broker's configs is refused before anything starts, with
the closest known name when there is one: a misspelled config would otherwise be ignored and the
test would run against defaults.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from rill.config import BROKER_CONFIGS, ConfigError

# Keywords of rill.testing.broker (and of the rill_broker_config marker) that are not configs.
OPTIONS = ("subprocess", "data_dir", "startup_timeout")


def text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def broker_configs(overrides: Mapping[str, Any] | None = None, **configs: Any) -> dict[str, str]:
    """``overrides`` (dotted names) and ``configs`` (keywords, ``_`` for ``.``) as broker configs;
    ConfigError names an unknown one."""
    props: dict[str, str] = {}
    for name, value in (overrides or {}).items():
        check_name(str(name))
        props[str(name)] = text(value)
    for keyword, value in configs.items():
        check_name(keyword.replace("_", "."), keyword=keyword)
        props[keyword.replace("_", ".")] = text(value)
    return props


def check_name(name: str, *, keyword: str | None = None) -> None:
    """Refuse ``name`` unless it is a broker config (``keyword``: how the test spelled it)."""
    if name in BROKER_CONFIGS or (name.startswith("listener.name.") and name.count(".") >= 3):
        return  # a config set for one listener (checked by the broker's config)
    spelled = keyword if keyword is not None else name
    if "." in spelled or keyword is None:
        known = list(BROKER_CONFIGS.keys)
    else:  # suggested as written: a keyword
        known = [k.replace(".", "_") for k in BROKER_CONFIGS.keys] + list(OPTIONS)
    close = difflib.get_close_matches(spelled, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"{spelled!r} is not a broker config{hint}")
