"""The client properties that would break the mirror's delivery are refused, with the reason; others pass."""

from __future__ import annotations

import pytest

from rill.mirror import MirrorConfig
from rill.mirror.client_settings import SettingError, start_position


@pytest.mark.parametrize(
    ("source", "target", "exactly_once", "refused"),
    [
        ({"enable.auto.commit": "true"}, {}, False, "enable.auto.commit=true"),
        ({"group.id": "mine"}, {}, False, "group.id=mine"),
        ({"auto.offset.reset": "error"}, {}, False, "auto.offset.reset=error"),
        ({"isolation.level": "read_uncommitted"}, {}, True, "isolation.level=read_uncommitted"),
        ({}, {"acks": "1"}, False, "acks=1"),
        ({}, {"request.required.acks": "0"}, True, "request.required.acks=0"),
        ({}, {"enable.idempotence": "false"}, False, "enable.idempotence=false"),
        ({}, {"transactional.id": "t"}, False, "transactional.id=t"),
        ({}, {"transactional.id": "t"}, True, "transactional.id=t"),
    ],
)
def test_properties_that_break_delivery_are_refused(
    source: dict[str, str], target: dict[str, str], exactly_once: bool, refused: str
) -> None:
    with pytest.raises(SettingError, match=f"{refused} is not allowed: "):
        MirrorConfig("s:9092", "t:9092", ".*", exactly_once=exactly_once, source_props=source, target_props=target)


def test_other_properties_pass_and_the_start_position_follows_auto_offset_reset() -> None:
    source = {"enable.auto.commit": "false", "auto.offset.reset": "largest", "isolation.level": "read_uncommitted"}
    target = {"acks": "-1", "enable.idempotence": "true", "linger.ms": "20"}
    config = MirrorConfig("s:9092", "t:9092", ".*", source_props=source, target_props=target)
    assert start_position(config.source_props) == "latest"
    assert start_position({}) == "earliest" and start_position({"auto.offset.reset": "smallest"}) == "earliest"
