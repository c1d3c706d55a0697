"""The client settings the mirror's delivery rests on, and the check that ``--source-config`` /
``--target-config`` do not change them.

The mirror's position in a source partition is committed by the mirror itself, once the target has
acknowledged every record below it, so the source consumer never commits on its own (``enable.auto.commit``)
and belongs to the mirror's own group (``group.id``, named by ``--name``). The target producer is idempotent
with acks=all: per partition the acknowledgements come in order, which is how the mirror knows the source
offset each one stands for, and an acknowledged record survives the loss of the target partition's leader.
With ``--exactly-once`` the mirror reads only committed source records and names each transactional producer
itself.

Other properties (security settings, timeouts, ``auto.offset.reset``: earliest by default, latest to copy only
what arrives after the mirror first takes a partition) pass through. A property that would break delivery is
refused with the reason, before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

START_POSITIONS = {"earliest": "earliest", "smallest": "earliest", "beginning": "earliest",
                   "latest": "latest", "largest": "latest", "end": "latest"}  # fmt: skip


class SettingError(ValueError):
    """A client property that would break the mirror's delivery."""


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def _refuse(option: str, name: str, value: Any, why: str) -> None:
    raise SettingError(f"{option}: {name}={value} is not allowed: {why}")


def check_source_props(props: Mapping[str, Any], exactly_once: bool) -> None:
    option = "--source-config"
    for name, value in props.items():
        if name == "enable.auto.commit" and _truthy(value):
            _refuse(option, name, value, "the mirror commits its positions itself, once the target has "
                    "acknowledged the records below them")  # fmt: skip
        elif name == "group.id":
            _refuse(option, name, value, "the mirror's group is rill-mirror-<name> (choose it with --name)")
        elif name == "auto.offset.reset" and str(value).strip().lower() not in START_POSITIONS:
            _refuse(option, name, value, "a partition the mirror has never copied starts at the earliest or the "
                    "latest offset")  # fmt: skip
        elif name == "isolation.level" and exactly_once and str(value).strip() != "read_committed":
            _refuse(option, name, value, "--exactly-once copies only committed source records (read_committed)")


def check_target_props(props: Mapping[str, Any], exactly_once: bool) -> None:
    option = "--target-config"
    for name, value in props.items():
        if name in ("acks", "request.required.acks") and str(value).strip().lower() not in ("all", "-1"):
            _refuse(option, name, value, "the mirror counts a record as copied once every in-sync replica of the "
                    "target has it (acks=all)")  # fmt: skip
        elif name == "enable.idempotence" and not _truthy(value):
            _refuse(option, name, value, "the target's acknowledgements must come in order, each record once "
                    "(an idempotent producer)")  # fmt: skip
        elif name == "transactional.id":
            why = "each source partition has a transactional id of its own" if exactly_once else (
                "copying in transactions is --exactly-once")  # fmt: skip
            _refuse(option, name, value, why)


def start_position(props: Mapping[str, Any]) -> str:
    """Where a partition the mirror has never copied starts: ``earliest`` (the default) or ``latest``."""
    return START_POSITIONS[str(props.get("auto.offset.reset", "earliest")).strip().lower()]
