"""sum and prod under CUDA autocast: float32 results read from the half input as it is."""

from __future__ import annotations

import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload


class _Involution(nn.Module):
    """Per-position kernels times unfolded patches, summed over the patch: the involution
    network's block whose bf16 product an H200 summed into float32 without a copy."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = nn.Linear(64, 9)
        self.mix = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        x = self.mix(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # bf16 under autocast
        kernels = self.weights(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).reshape(b, 1, 9, -1)
        patches = nn.functional.unfold(x, 3, padding=1).view(b, 64, 9, -1)
        return (kernels * patches).sum(2)


def _allocs(precision: str, batch: int) -> list[tuple[int, str]]:
    work = Workload(
        build_model=_Involution,
        make_batch=lambda: torch.randn(batch, 64, 32, 32),
        loss_fn=lambda m, b: m(b).float().mean(),
        optimizer="sgd",
        precision=precision,
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    return [(e.size, trace.infos[e.info].op) for e in trace.events if e.kind == "alloc"]


def test_a_half_sum_under_autocast_is_not_cast_first() -> None:
    product = 8 * 64 * 9 * 32 * 32  # elements of kernels * patches
    allocs = _allocs("bf16-mixed", 8)
    assert (product * 2, "mul") in allocs  # the bf16 product
    assert all(size != product * 4 for size, _ in allocs)  # no float32 copy of it
    summed = 8 * 64 * 32 * 32 * 4
    assert (summed, "sum") in allocs  # a float32 result


def test_no_accumulation_buffer_where_the_float32_output_holds_the_sums() -> None:
    """Past 32-bit indexing a reduction accumulates in its output when the output is of the
    accumulation type (float32 here), with no buffer of its own."""
    allocs = _allocs("bf16-mixed", 2048)
    product = 2048 * 64 * 9 * 32 * 32 * 2
    assert (product, "mul") in allocs and product > 2**31  # past 32-bit indexing
    summed = 2048 * 64 * 32 * 32 * 4  # the forward's float32 sums
    assert (summed, "reduction accumulation buffer") not in allocs
    # a bf16 output cannot hold them: backward's bf16 sum over the channels takes a buffer
    assert (2048 * 9 * 32 * 32 * 4, "reduction accumulation buffer") in allocs
