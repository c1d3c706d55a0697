"""Configs as tests write them (the rill_broker_config marker takes what rill.testing.broker takes;
an unknown name is refused before anything starts), and a failed test's report carries the end of
its subprocess broker's log."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

import rill.testing
from rill.config import ConfigError

pytestmark = pytest.mark.timeout(120)


def configs(b: rill.testing.TestBroker) -> tuple[int, int]:
    config = b.broker.config
    return config.get("num.partitions"), config.get("log.retention.ms")


@pytest.mark.rill_broker_config(num_partitions=3, log_retention_ms=60000)
def test_marker_keywords_stand_for_dotted_names(rill_broker: rill.testing.TestBroker) -> None:
    assert configs(rill_broker) == (3, 60000)


@pytest.mark.rill_broker_config({"num.partitions": "3", "log.retention.ms": 60000})
def test_marker_takes_a_dict(rill_broker: rill.testing.TestBroker) -> None:
    assert configs(rill_broker) == (3, 60000)


@pytest.mark.rill_broker_config(num_partitions=2, log_retention_ms=1234)
class TestMarkersAddUp:
    @pytest.mark.rill_broker_config(num_partitions=3)
    def test_the_closest_wins(self, rill_broker: rill.testing.TestBroker) -> None:
        assert configs(rill_broker) == (3, 1234)


@pytest.mark.rill_broker_config(subprocess=True, num_partitions=3)
def test_marker_takes_the_options(rill_broker: rill.testing.TestBroker) -> None:
    assert rill_broker.subprocess and rill_broker.running


@pytest.mark.parametrize(
    ("overrides", "keywords", "named", "suggested"),
    [
        (None, {"partitions": 3}, "'partitions'", "'num_partitions'"),
        ({"num.partiton": "3"}, {}, "'num.partiton'", "'num.partitions'"),
        (None, {"startup_timeot": 5}, "'startup_timeot'", "'startup_timeout'"),
        ({"retention.ms": "1000"}, {}, "'retention.ms'", "'log.retention.ms'"),
    ],
)
def test_unknown_config_is_refused_before_anything_starts(
    overrides: dict[str, str] | None,
    keywords: dict[str, int],
    named: str,
    suggested: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    threads = threading.active_count()
    with pytest.raises(ConfigError) as refused, rill.testing.broker(overrides, **keywords):
        pass
    message = str(refused.value)
    assert named in message and f"did you mean {suggested}" in message, message
    assert list(tmp_path.iterdir()) == [] and threading.active_count() == threads
    with pytest.raises(ConfigError, match=r"'num\.partiton'"):
        rill.testing.TestBroker({"num.partiton": "3"})


# Run by an inner pytest: the report of a failed test shows its broker's log; a misspelled config in
# the marker fails the setup, naming it.
INNER_TESTS = """
import pytest

@pytest.mark.rill_broker_config(subprocess=True)
def test_fails(rill_broker):
    assert False, "the application's bug"

@pytest.mark.rill_broker_config(subprocess=True)
def test_passes(rill_broker):
    pass

@pytest.mark.rill_broker_config(num_partiton=3)
def test_misspelled(rill_broker):
    pass
"""


def test_failed_test_report_has_the_broker_log(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "test_inner.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )
    out = run.stdout
    assert "1 failed, 1 passed, 1 error" in out, out
    failure = out[out.index("_ test_fails _") : out.index("short test summary")]
    assert "rill broker log" in failure, out
    assert "Broker 0 serving on PLAINTEXT://127.0.0.1:" in failure  # a line of the subprocess broker's log
    assert out.count("rill broker log") == 1  # the test that passed has none
    assert "'num_partiton' is not a broker config; did you mean 'num_partitions'?" in out
