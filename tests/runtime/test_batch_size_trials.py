"""The GPU-trial decisions of find_batch_size, on the CPU: a real estimate search (tiny BERT)
and scripted runners that play a GPU whose real memory differs from the estimate."""

from __future__ import annotations

import pytest
import torch
from test_batch_size import tiny_bert  # the same tiny BERT as the search tests

import memfit
from memfit._gpus import resolve_gpu
from memfit._units import MiB
from memfit.estimator._estimate import estimate_workload
from memfit.runtime._bs_search import EstimateSearch
from memfit.runtime._bs_trials import TrialRun, run_trials
from memfit.workload._step import Workload, default_loss

GPU = resolve_gpu("1GiB")
MARGIN = int(0.02 * GPU.total)
BUDGET = GPU.total - MARGIN


def _estimate_at(n):
    def batch():
        ids = torch.randint(0, 1000, (n, 128))
        return {"input_ids": ids, "labels": ids}

    return estimate_workload(Workload(tiny_bert, batch, default_loss, name="bert", gpu=GPU))


@pytest.fixture(scope="module")
def search():
    return EstimateSearch(_estimate_at)


@pytest.fixture(scope="module")
def proposal(search):
    return search.largest_fitting(BUDGET)


def gpu_whose_step_needs(search, extra, capacity=None):
    """A runner for a GPU where the real peak reserved is the estimate plus ``extra`` bytes
    and the allocator can hold ``capacity`` bytes (out of memory above it)."""
    calls = []
    room = capacity if capacity is not None else GPU.total - GPU.context

    def run(n):
        calls.append(n)
        real = search.point(n).peak_reserved + extra
        if real > room:
            return TrialRun(True, room - 10 * MiB, room - 12 * MiB, 0.5, capacity=room)
        return TrialRun(False, real, real - MiB, 1.0, capacity=room)

    return run, calls


def test_an_exact_estimate_is_confirmed_in_one_trial(search, proposal):
    run, calls = gpu_whose_step_needs(search, 0)
    best, trials = run_trials(search, proposal, BUDGET, run, margin=MARGIN, max_trials=3)
    assert best == proposal and calls == [proposal]
    assert trials[0].fits and trials[0].outcome == "fits"
    assert trials[0].predicted_reserved == trials[0].peak_reserved


def test_a_step_that_overshoots_the_budget_steps_down_by_the_error(search, proposal):
    extra = 40 * MiB
    run, calls = gpu_whose_step_needs(search, extra)
    best, trials = run_trials(search, proposal, BUDGET, run, margin=MARGIN, max_trials=3)
    assert next(t.outcome for t in trials) in ("over budget", "out of memory")
    assert trials[-1].fits and best == calls[-1] < proposal
    # the answer is the largest batch whose real step fits: one more would not
    assert search.point(best).total + extra <= BUDGET
    assert len(trials) <= 3


def test_out_of_memory_uses_the_room_the_gpu_really_has(search, proposal):
    # another process holds 60 MiB: the allocator can hold less than the budget assumed
    room = BUDGET - GPU.context - 60 * MiB
    run, _ = gpu_whose_step_needs(search, 0, capacity=room)
    best, trials = run_trials(search, proposal, BUDGET, run, margin=MARGIN, max_trials=3)
    assert trials[0].outcome == "out of memory"
    assert trials[-1].fits and search.point(best).peak_reserved <= room
    assert best < proposal


def test_a_high_estimate_earns_one_larger_trial(search, proposal):
    extra = -120 * MiB  # the real step needs less than predicted
    run, calls = gpu_whose_step_needs(search, extra)
    best, trials = run_trials(search, proposal, BUDGET, run, margin=MARGIN, max_trials=3)
    assert calls[0] == proposal and len(calls) == 2 and calls[1] > proposal
    assert best == calls[1] and all(t.fits for t in trials)


def test_a_failed_step_up_keeps_the_batch_that_fitted(search, proposal):
    state = {"n": 0}

    def run(n):
        state["n"] += 1
        if state["n"] == 1:  # the proposal runs with lots of room left ...
            return TrialRun(False, search.point(n).peak_reserved - 200 * MiB, 0, 1.0)
        return TrialRun(True, 0, 0, 0.3)  # ... and the larger batch does not

    best, trials = run_trials(search, proposal, BUDGET, run, margin=MARGIN, max_trials=3)
    assert best == proposal and [t.fits for t in trials] == [True, False]


def test_no_trial_fitting_is_a_clear_error(search, proposal):
    run, calls = gpu_whose_step_needs(search, 10 * GPU.total)
    with pytest.raises(memfit.DoesNotFitError, match=r"No batch size tried fits") as info:
        run_trials(search, proposal, BUDGET, run, margin=MARGIN, max_trials=3)
    assert len(calls) == 3 and calls == sorted(calls, reverse=True)
    assert f"{calls[0]} (out of memory" in str(info.value)


def test_max_trials_is_respected(search, proposal):
    run, calls = gpu_whose_step_needs(search, 10 * GPU.total)
    with pytest.raises(memfit.DoesNotFitError):
        run_trials(search, proposal, BUDGET, run, margin=MARGIN, max_trials=1)
    assert calls == [proposal]
