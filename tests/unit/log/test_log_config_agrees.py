"""The topic configs a request may set and the log's own reading of them agree: a value that
``validate_topic_configs`` lets through never fails later when a log is configured with it (a change the
broker accepted but could not follow was stored, and stopped the next start)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rill.config import validate_topic_configs
from rill.errors import KafkaError
from rill.log.log_config import _TOPIC_CONFIGS, LogConfig

_EDGES = ["", " ", ",", "0", "-1", "-2", "1", "14", "13", "4", "3", str(2**31 - 1), str(2**31), str(2**63 - 1),
          str(2**63), "1.5", "abc", "delete", "compact", "delete,compact", "compact,delete", " delete , compact ",
          "delete,", "delete,bogus", "CreateTime", "LogAppendTime", "createtime"]  # fmt: skip


def _accepts(check: object, name: str, value: str) -> bool:
    try:
        check({name: value})  # type: ignore[operator]
    except (KafkaError, ValueError):
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(sorted(_TOPIC_CONFIGS)), value=st.one_of(st.sampled_from(_EDGES), st.text(max_size=8)))
def test_what_a_request_may_set_a_log_can_take(name: str, value: str) -> None:
    if _accepts(validate_topic_configs, name, value):
        assert _accepts(LogConfig.from_topic_configs, name, value), f"{name}={value!r}"


def test_an_empty_cleanup_policy_keeps_everything() -> None:
    """Kafka 4.2: an empty cleanup.policy means infinite retention and no compaction."""
    validate_topic_configs({"cleanup.policy": ""})
    config = LogConfig.from_topic_configs({"cleanup.policy": ""})
    assert not config.delete_enabled and not config.compacted
