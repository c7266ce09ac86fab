"""torchvision's deformable convolution is traced as its CUDA kernel allocates: the sizes and
order an H200 trace showed (torchvision 0.26, a 512-channel 3x3 deformable convolution at
32x32, batch 64, float32: benchmarks/results/2026-12-07-h200-handwritten-models-fourth)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload

ops = pytest.importorskip("torchvision.ops")


class _Deform(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.offset = nn.Conv2d(512, 27, 3, padding=1)
        self.conv = ops.DeformConv2d(512, 512, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o1, o2, mask = torch.chunk(self.offset(x), 3, dim=1)
        return self.conv(x, torch.cat([o1, o2], 1), torch.sigmoid(mask))


def _sizes(batch: int) -> list[tuple[str, int]]:
    x = torch.randn(batch, 512, 32, 32)
    work = Workload(
        build_model=_Deform,
        make_batch=lambda: x,
        loss_fn=lambda m, b: m(b).float().square().mean(),
        optimizer="sgd",
        precision="fp32",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    out = []
    for e in trace.events:
        if e.kind == "alloc" and e.info is not None and "deform" in trace.infos[e.info].op:
            out.append((trace.infos[e.info].op, e.size))
    return out


def test_the_forward_makes_its_output_twice_and_its_columns_first() -> None:
    sizes = _sizes(64)
    forward = [s for s in sizes if "backward" not in s[0] and "gradient" not in s[0]][:4]
    # the H200's: 134,217,728 twice, then the columns of 512 x 9 rows by 32 images' pixels
    assert [n for _, n in forward] == [134217728, 134217728, 603979776, 134217728]


def test_the_backward_takes_its_columns_twice_with_its_gradient_copies() -> None:
    sizes = dict((label, n) for label, n in _sizes(64))
    assert sizes["deformable convolution backward columns"] == 603979776
    assert sizes["deformable convolution backward gradient slice"] == 67108864
    assert sizes["deformable convolution backward blocked gradient"] == 134217728
    assert sizes["deformable convolution weight gradient columns"] == 603979776


def test_blocks_are_the_largest_divisor_of_the_batch_up_to_32() -> None:
    sizes = dict((label, n) for label, n in _sizes(36))  # blocks of 18 images
    assert sizes["deformable convolution columns"] == 512 * 9 * 18 * 1024 * 4
