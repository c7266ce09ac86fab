"""The tracer on small models whose memory can be worked out by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit import Category, estimate
from memfit._gpus import resolve_gpu
from memfit.trace import trace_workload
from memfit.workload import make_workload
from memfit.workload._step import Workload

H200 = resolve_gpu("h200")


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024))


PARAM_BYTES = (1024 * 4096 + 4096 + 4096 * 1024 + 1024) * 4


def test_parameters_gradients_and_adam_state_are_exact():
    est = estimate(mlp, lambda: torch.randn(64, 1024), optimizer="adamw", gpu="h200")
    assert est.workload.parameters == PARAM_BYTES // 4
    cats = est.by_category
    # Sizes in the breakdown are requested bytes (before the allocator rounds up).
    assert cats[Category.PARAMETER] == PARAM_BYTES
    assert cats.get(Category.OPTIMIZER_STATE, 0) in (0, 2 * PARAM_BYTES)
    assert est.peak_allocated >= 4 * PARAM_BYTES  # params + grads + 2 Adam states


def test_sgd_without_momentum_state_is_smaller_than_adam():
    adam = estimate(mlp, lambda: torch.randn(64, 1024), optimizer="adamw")
    sgd = estimate(mlp, lambda: torch.randn(64, 1024), optimizer="sgd")
    # SGD with momentum keeps one buffer per parameter, Adam two.
    assert adam.peak_allocated - sgd.peak_allocated >= PARAM_BYTES - 2**20


def test_inference_holds_no_gradients_or_state():
    est = estimate(mlp, lambda: torch.randn(64, 1024), mode="infer")
    assert Category.GRADIENT not in est.by_category
    assert Category.OPTIMIZER_STATE not in est.by_category
    # parameters, one cuBLAS workspace (32 MiB on Hopper), and a few activations
    assert est.peak_allocated < PARAM_BYTES + 32 * 2**20 + 4 * 2**20


def test_every_free_matches_an_earlier_alloc():
    work = Workload(mlp, lambda: torch.randn(8, 1024), lambda m, b: m(b).sum())
    trace = trace_workload(work, H200)
    live: set[int] = set()
    for event in trace.events:
        if event.kind == "alloc":
            assert event.block not in live
            live.add(event.block)
        else:
            assert event.block in live
            live.remove(event.block)


def test_user_module_is_not_modified():
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    estimate(model, torch.randn(4, 1024))
    after = list(model.parameters())
    assert all(p.device.type == "cpu" for p in after)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=False))


def test_cuda_device_in_user_code_is_traced_without_a_gpu():
    def make_batch():
        return torch.randn(16, 1024, device="cuda")

    est = estimate(mlp, make_batch, mode="infer")
    assert est.by_category[Category.INPUT] == 16 * 1024 * 4
    assert not torch.cuda.is_initialized()


def test_cublas_workspaces_one_per_thread_plus_cublaslt():
    est = estimate(mlp, lambda: torch.randn(64, 1024), gpu="h200")
    # the peak is in the foreach AdamW step: the forward thread's and the autograd thread's
    # 32 MiB cuBLAS workspaces, and the 1 MiB cublasLt workspace of the first addmm
    assert est.by_category[Category.WORKSPACE] == 2 * 32 * 2**20 + 2**20


def test_two_steps_peak_is_not_lower_than_one():
    one = estimate(mlp, lambda: torch.randn(64, 1024), steps=1)
    two = estimate(mlp, lambda: torch.randn(64, 1024), steps=2)
    assert two.peak_allocated >= one.peak_allocated


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_pure_low_precision_halves_parameters(precision):
    est = estimate(mlp, lambda: torch.randn(64, 1024), precision=precision)
    assert est.by_category[Category.PARAMETER] == PARAM_BYTES // 2


def _step_with_a_scratch(empty: bool):  # type: ignore[no-untyped-def]
    """A user's step that frees a 96 MiB scratch buffer, maybe empties the cache, then takes
    a 160 MiB one: cached, the first segment cannot hold the second, so both are reserved."""

    def step(model, batch, optimizer):  # type: ignore[no-untyped-def]
        device = next(model.parameters()).device
        scratch = torch.empty(96 * 2**20, dtype=torch.uint8, device=device)
        del scratch
        if empty:
            torch.cuda.empty_cache()
        scratch = torch.empty(160 * 2**20, dtype=torch.uint8, device=device)
        del scratch
        model(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def test_a_steps_empty_cache_frees_the_cached_segments_in_the_replay():
    def est(empty: bool):  # type: ignore[no-untyped-def]
        step = _step_with_a_scratch(empty)
        return estimate(mlp, _batch64, step_fn=step, gpu="h200", optimizer="sgd", steps=1)

    kept, emptied = est(False), est(True)
    assert kept.peak_allocated == emptied.peak_allocated
    assert kept.peak_reserved - emptied.peak_reserved == 96 * 2**20
    workload = make_workload(mlp, _batch64, step_fn=_step_with_a_scratch(True), steps=1)
    trace = trace_workload(workload, H200)
    assert len(trace.empty_cache_at) == 1 and trace.empty_cache_at[0] > trace.steps_start


def _batch64() -> torch.Tensor:
    return torch.randn(64, 1024)
