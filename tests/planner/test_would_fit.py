"""What would fit where nothing does: no hint traced that cannot fit (the parameters and
optimizer states alone are over the budget), and the hints' traces run side by side with the
same answer as one after the other."""

from __future__ import annotations

import multiprocessing
import os
from types import SimpleNamespace
from typing import Any

import pytest

from memfit import MemfitError
from memfit.planner import Candidate
from memfit.planner._would_fit import first_found, state_floor

PARENT = os.getpid()


def _c(precision: str, optimizer: str) -> Candidate:
    return Candidate(1, 1, precision, True, optimizer)


def test_the_floor_is_the_parameters_and_adams_two_states() -> None:
    params = (1000, 800)  # 200 frozen: no optimizer states
    assert state_floor(_c("fp32", "adamw-fused"), params) == 1000 * 4 + 2 * 4 * 800
    assert state_floor(_c("bf16-mixed", "adamw-in-backward"), params) == 4000 + 6400
    assert state_floor(_c("bf16", "adam"), params) == 1000 * 2 + 2 * 2 * 800
    assert state_floor(_c("bf16-mixed", "adamw-8bit"), params) == 4000 + 2 * 800
    assert state_floor(_c("fp32", "sgd"), params) == 4000


def _ev(workers: int) -> Any:
    return SimpleNamespace(workers=workers, traces=0)


def _needs(n: int) -> Any:
    def trial() -> int:
        return n * 10 + (0 if os.getpid() == PARENT else 1)  # the last digit: where it ran

    return trial


def test_trials_one_after_the_other_stop_at_the_first_found() -> None:
    ev = _ev(1)
    found, results = first_found(ev, [_needs(n) for n in (9, 5, 3, 1)], lambda r: r < 40)
    assert found == 2 and results == [90, 50, 30] and ev.traces == 3


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="forks")
def test_trials_side_by_side_find_the_same_first() -> None:
    ev = _ev(2)
    found, results = first_found(ev, [_needs(n) for n in (9, 5, 3, 1)], lambda r: r < 40)
    assert found == 2 and [r // 10 for r in results] == [9, 5, 3]
    assert all(r % 10 == 1 for r in results)  # traced in forked workers
    assert ev.traces == 4  # all of them ran

    def broken() -> int:
        raise MemfitError("cannot shard this model")

    # a failure is raised where no trial before it is found, in the order they are tried
    with pytest.raises(MemfitError, match="cannot shard"):
        first_found(_ev(2), [_needs(9), broken, _needs(1)], lambda r: r < 40)
    assert first_found(_ev(2), [_needs(1), broken], lambda r: r < 40)[0] == 0


def test_a_budget_under_the_floor_traces_no_shorter_sequences(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GPT-2 (124M parameters) holds 1.5 GB of fp32 weights and AdamW states: no sequence
    length fits 1 GiB, so none is traced."""
    from memfit.planner import _would_fit, plan

    def planned() -> Any:
        return plan(
            "gpt2",
            budget="1GiB",
            global_batch=1,
            batch_size=1,
            seq_len=256,
            precisions=("fp32",),
            checkpointing=(True,),
            optimizers=("adamw-fused",),
            offloads=(),
            workers=1,
        )

    result = planned()
    assert result.chosen is None
    assert not any("sequences of" in line for line in result.would_fit)
    assert "FSDP2" in " ".join(result.would_fit)
    monkeypatch.setattr(_would_fit, "state_floor", lambda c, parameters: 0)
    unfloored = planned()
    assert unfloored.would_fit == result.would_fit  # the same hints...
    assert unfloored.traces == result.traces + 3  # ...without 128, 64 and 32 tokens traced
