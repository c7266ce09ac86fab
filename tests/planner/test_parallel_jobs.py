"""The planner's worker processes: a job PyTorch refuses in a forked child (the parent had
started autograd's device threads) runs in the parent instead; other errors surface."""

from __future__ import annotations

import multiprocessing
import os
from types import SimpleNamespace
from typing import Any

import pytest

from memfit.planner._parallel import run_jobs

pytestmark = pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs fork"
)
PARENT = os.getpid()


def _refused_in_children(ev: Any, item: int) -> None:
    if os.getpid() != PARENT and item % 2:
        raise RuntimeError(
            "Unable to handle autograd's threading in combination with fork-based "
            "multiprocessing. See https://github.com/pytorch/pytorch/wiki/Autograd-and-Fork"
        )
    ev.seen[item] = os.getpid() == PARENT
    ev.traces += 1


def test_a_job_refused_in_a_forked_worker_runs_in_the_parent() -> None:
    ev: Any = SimpleNamespace(seen={}, traces=0)
    progress: list[tuple[int, int]] = []
    run_jobs(ev, _refused_in_children, list(range(6)), 2, lambda n, of: progress.append((n, of)))
    assert sorted(ev.seen) == list(range(6)) and ev.traces == 6
    assert all(ev.seen[i] for i in (1, 3, 5))  # the refused ones ran here
    assert not any(ev.seen[i] for i in (0, 2, 4))  # the others in the workers
    assert sorted(n for n, _ in progress) == list(range(1, 7))


def _fails(ev: Any, item: int) -> None:
    raise ValueError(f"job {item} is broken")


def test_another_error_in_a_worker_surfaces() -> None:
    with pytest.raises(ValueError, match="is broken"):
        run_jobs(SimpleNamespace(seen={}, traces=0), _fails, [1, 2], 2)


def _job(ev: Any, item: int) -> None:
    ev.seen[item] = os.getpid() == PARENT
    ev.traces += 1


def test_where_no_child_can_run_autograd_every_job_runs_in_the_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memfit.planner import _parallel

    monkeypatch.setattr(_parallel, "_backward_probe", lambda: os._exit(1))  # refused in a child
    ev: Any = SimpleNamespace(seen={}, traces=0)
    run_jobs(ev, _job, list(range(4)), 2)
    assert ev.seen == {0: True, 1: True, 2: True, 3: True}
    ev = SimpleNamespace(seen={}, traces=0)
    monkeypatch.undo()
    run_jobs(ev, _job, list(range(4)), 2)
    assert not any(ev.seen.values())  # forked workers ran them


def test_a_process_that_initialized_cuda_runs_every_job_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child of a process that has used CUDA fails its first CUDA call: a training script or
    a notebook that has touched the GPU plans in its own process."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    ev: Any = SimpleNamespace(seen={}, traces=0)
    run_jobs(ev, _job, list(range(4)), 2)
    assert ev.seen == {0: True, 1: True, 2: True, 3: True}


def _dies(ev: Any, item: int) -> None:
    if os.getpid() != PARENT and item == 1:
        os._exit(9)  # a worker killed mid-job (the kernel's OOM killer, say)
    _job(ev, item)


def test_the_job_of_a_worker_that_died_runs_here() -> None:
    ev: Any = SimpleNamespace(seen={}, traces=0)
    run_jobs(ev, _dies, list(range(4)), 2)
    assert sorted(ev.seen) == [0, 1, 2, 3] and ev.seen[1] is True and ev.traces == 4


def _all_die(ev: Any, item: int) -> None:
    if os.getpid() != PARENT:
        os._exit(9)
    _job(ev, item)


def test_jobs_no_worker_was_left_to_take_run_here() -> None:
    ev: Any = SimpleNamespace(seen={}, traces=0)
    run_jobs(ev, _all_die, list(range(5)), 2)
    assert ev.seen == dict.fromkeys(range(5), True) and ev.traces == 5
