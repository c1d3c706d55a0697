"""Configs a Kafka server.properties may set but whose feature Rill has not built are taken, and named in one
warning at start (they used to be accepted without a word, as if the feature worked)."""

from __future__ import annotations

import logging

import pytest

import rill.testing
from rill.config import BROKER_CONFIGS
from rill.config.definitions import NOT_YET_USED
from rill.config.kafka_definitions import KAFKA_ONLY


def test_the_unused_configs_are_broker_configs() -> None:
    assert set(BROKER_CONFIGS.keys) >= NOT_YET_USED | KAFKA_ONLY


def test_a_broker_says_which_configs_it_does_not_use(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rill.broker")
    configs = {"log.preallocate": "true", "num.io.threads": "8", "sasl.kerberos.service.name": "kafka"}
    with rill.testing.broker(configs):
        pass
    (line,) = [r.getMessage() for r in caplog.records if "not used by this version" in r.getMessage()]
    assert line.endswith("log.preallocate, num.io.threads, sasl.kerberos.service.name")


def test_no_warning_when_none_is_set(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rill.broker")
    with rill.testing.broker():
        pass
    assert not [r for r in caplog.records if "not used by this version" in r.getMessage()]
