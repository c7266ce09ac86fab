"""What a trace counts of each phase's arithmetic and traffic (``costs=True``), the inputs of
the planner's step-time model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace import _tracer, trace_workload
from memfit.workload import make_workload

H200 = resolve_gpu("h200")


def _traced(precision: str = "fp32", **options: object):  # type: ignore[no-untyped-def]
    workload = make_workload(
        lambda: nn.Linear(512, 256, bias=False),
        lambda: torch.randn(64, 512),
        loss_fn=lambda m, b: m(b).sum(),
        precision=precision,
        **options,
    )
    return trace_workload(workload, H200, costs=True)


def test_a_linear_layers_matrix_products_are_counted_by_pytorchs_formulas() -> None:
    costs = _traced().costs
    assert costs is not None
    forward = costs.phases["step2.forward"]
    assert forward.fp32_flops == 2 * 64 * 512 * 256  # one (64, 512) x (512, 256) product
    assert forward.tensor_core_flops == 0  # float32 matrix products run on CUDA cores
    # backward: the weight's gradient only (the input needs none): one product as large
    assert costs.phases["step2.backward"].fp32_flops == 2 * 64 * 512 * 256
    assert forward.bytes >= (64 * 512 + 512 * 256 + 64 * 256) * 4
    assert forward.kernels >= 2  # the product and the sum (views launch nothing)


def test_half_precision_products_count_as_tensor_core_work() -> None:
    costs = _traced("bf16-mixed").costs
    assert costs is not None
    forward = costs.phases["step2.forward"]
    assert forward.tensor_core_flops == 2 * 64 * 512 * 256
    assert forward.fp32_flops == 0


@pytest.mark.parametrize("repeat", [False, True])
def test_a_copied_step_counts_what_a_traced_one_does(
    repeat: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tracer, "REPEAT_STEPS", repeat)
    trace = _traced(accumulation=2)
    assert trace.costs is not None
    assert trace.copied_steps == (1 if repeat else 0)
    for phase in ("input", "forward", "backward"):
        assert trace.costs.phases[f"step2.{phase}"] == trace.costs.phases[f"step1.{phase}"]


def test_costs_are_not_counted_unless_asked() -> None:
    workload = make_workload(lambda: nn.Linear(8, 8), lambda: torch.randn(2, 8))
    assert trace_workload(workload, H200).costs is None


def _optimizer_ops(optimizer: str) -> list[tuple[str, int, int]]:
    workload = make_workload(
        lambda: nn.Sequential(*[nn.Linear(256, 256) for _ in range(4)]),
        lambda: torch.randn(8, 256),
        loss_fn=lambda m, b: m(b).sum(),
        optimizer=optimizer,
    )
    costs = trace_workload(workload, H200, costs=True).costs
    assert costs is not None
    return costs.phases["step2.optimizer"].ops


def test_the_optimizers_traffic_is_what_its_cuda_kernels_move() -> None:
    params = 4 * (256 * 256 + 256) * 4  # bytes of one float32 copy of the parameters
    foreach, fused = _optimizer_ops("adamw-foreach"), _optimizer_ops("adamw-fused")
    # each in-place foreach op is one kernel, counted once, reading its lists and writing the
    # first; the fused kernel reads parameters, gradients and both moments and writes three
    assert sum(k == "mem" for k, _, _ in foreach) < 15
    assert sum(b for _, _, b in foreach) > 2 * sum(b for _, _, b in fused)
    assert sum(b for _, _, b in fused) >= 7 * params


def test_a_value_read_from_a_host_tensor_is_no_sync() -> None:
    ops = _optimizer_ops("adamw-foreach")  # the step counts live on the host
    assert not any(k == "sync" for k, _, _ in ops)
