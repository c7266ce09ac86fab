"""Fixtures for the OOM report tests: an observer with a fake probe, cleaned up after."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from oom_data import FakeProbe

from memfit.oom import _hook, _observer


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> FakeProbe:
    fake = FakeProbe()
    monkeypatch.setattr(_observer, "PROBE", fake)
    return fake


class _AtExit:
    """Stands in for ``atexit`` in ``_hook``: the handlers are dropped after each test."""

    def __init__(self) -> None:
        self.handlers: list[Callable[[], None]] = []

    def register(self, fn: Callable[[], None]) -> None:
        self.handlers.append(fn)

    def unregister(self, fn: Callable[[], None]) -> None:
        self.handlers = [h for h in self.handlers if h != fn]


@pytest.fixture(autouse=True)
def no_hooks_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[_AtExit]:
    """Every test starts and ends with no hook installed and no exit handler registered."""
    fake = _AtExit()
    monkeypatch.setattr(_hook, "atexit", fake)
    yield fake
    for hook in list(_observer._hooks):
        _observer.uninstall(hook)
