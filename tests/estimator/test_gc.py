"""The garbage collector during an estimate: paused for imports, the process's objects frozen
during the trace, and its state as the process left it afterwards (estimator._gc)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch

import memfit
from memfit.estimator._gc import gc_frozen, gc_paused


@pytest.fixture(autouse=True)
def _collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_paused_then_enabled() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()


def test_paused_restores_after_an_error() -> None:
    with pytest.raises(ValueError, match="boom"), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_frozen_hides_old_objects_and_brings_them_back() -> None:
    assert gc.get_freeze_count() == 0
    with gc_frozen():
        assert gc.get_freeze_count() > 0
        gc.collect()  # a full pass: the frozen objects stay frozen
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_frozen_leaves_the_process_own_freeze_alone() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with gc_frozen():
        pass
    assert gc.get_freeze_count() == frozen  # not unfrozen by memfit


def test_estimate_leaves_the_collector_as_it_was() -> None:
    est = memfit.estimate(lambda: torch.nn.Linear(8, 8), torch.randn(2, 8), optimizer="sgd")
    assert est.peak_allocated > 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
