"""torchvision's ops under CUDA autocast run as torchvision's own autocast kernels do: the
floating inputs cast to float32, the op in float32, its output cast back to the input's dtype
(csrc/ops/autocast/roi_align_kernel.cpp). A detection model's box head meets a bfloat16 feature
map and float32 boxes there, which the op itself refuses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace import trace_workload
from memfit.workload import make_workload

torchvision = pytest.importorskip("torchvision")

C, H, K = 4, 16, 6  # channels, feature map side, boxes


class _BoxHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, C, 3, padding=1)

    def forward(self, image: torch.Tensor, rois: torch.Tensor) -> torch.Tensor:
        pooled = torchvision.ops.roi_align(self.conv(image), rois, 2)
        assert pooled.dtype == torch.bfloat16  # cast back to the feature map's dtype
        return pooled.float().sum()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    boxes = torch.tensor([[0.0, 1, 1, 8, 8]]).repeat(K, 1)
    return torch.randn(1, 3, H, H), boxes


def test_roi_align_under_autocast_runs_in_float32_and_casts_back() -> None:
    work = make_workload(
        _BoxHead, _batch, loss_fn=lambda m, b: m(*b), precision="bf16-mixed", optimizer="sgd"
    )
    trace = trace_workload(work, resolve_gpu("h100"))
    forward = [
        (trace.infos[e.info].op, trace.infos[e.info].dtype, e.size)
        for e in trace.events
        if e.kind == "alloc" and e.info is not None and trace.infos[e.info].phase == "step1.forward"
    ]
    at = next(i for i, a in enumerate(forward) if a[0] == "roi_align")
    feature_map = 1 * C * H * H
    assert forward[at - 1] == ("_to_copy", "float32", feature_map * 4)  # the float32 copy
    assert forward[at] == ("roi_align", "float32", K * C * 2 * 2 * 4)
    assert forward[at + 1] == ("_to_copy", "bfloat16", K * C * 2 * 2 * 2)  # cast back
