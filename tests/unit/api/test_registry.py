"""The handler registry fails loudly: a handler module that cannot be imported (a typo in its name)
or that registers nothing stops the broker from starting, instead of an API silently missing from
ApiVersions; and every module of ``rill.api`` that declares a handler is in the list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rill.api
import rill.testing
from rill.api import registry

pytestmark = pytest.mark.timeout(60)


def test_a_missing_handler_module_is_an_error() -> None:
    with pytest.raises(RuntimeError, match=r"rill\.api\.fetchh cannot be imported"):
        registry.load_handlers(("rill.api.metadata", "rill.api.fetchh"))


def test_a_module_that_registers_nothing_is_an_error() -> None:
    with pytest.raises(RuntimeError, match=r"rill\.api\._topics register no handler"):
        registry.load_handlers(("rill.api.metadata", "rill.api._topics"))


def test_a_broker_with_a_missing_handler_module_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "HANDLER_MODULES", (*registry.HANDLER_MODULES, "rill.api.list_offset"))
    with (
        pytest.raises(Exception, match=r"rill\.api\.list_offset cannot be imported"),
        rill.testing.broker(),
    ):
        pass


def test_every_module_declaring_a_handler_is_loaded() -> None:
    package = Path(rill.api.__file__).parent
    declaring = {
        f"rill.api.{path.stem}"
        for path in package.glob("*.py")
        if re.search(r"^@handler\(", path.read_text(), re.MULTILINE)
    }
    assert declaring and declaring <= set(registry.HANDLER_MODULES)
    assert set(registry.load_handlers()) == {h.api_key for h in registry.REGISTRY.values()}


async def _nothing(ctx: object, body: object) -> None:
    return None


def test_a_handler_the_codec_cannot_serve_is_an_error() -> None:
    known = registry.ApiHandler(3, 0, 13, _nothing)
    assert registry.supported_versions({3: known}) == [{"api_key": 3, "min_version": 0, "max_version": 13}]
    undeclared = registry.ApiHandler(9999, 0, 1, _nothing)
    with pytest.raises(RuntimeError, match="API key 9999, which the codec does not declare"):
        registry.supported_versions({3: known, 9999: undeclared})
    too_new = registry.ApiHandler(3, 90, 99, _nothing)
    with pytest.raises(RuntimeError, match=r"handles Metadata v90-v99; the codec declares v0-v13"):
        registry.supported_versions({3: too_new})
