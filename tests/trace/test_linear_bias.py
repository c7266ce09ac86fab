"""``F.linear`` on a non-contiguous input adds its bias in place on a real GPU; ATen takes the
out-of-place path under any Python dispatch mode, which the trace must not copy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload


class _Head(nn.Module):
    def __init__(self, transpose: bool) -> None:
        super().__init__()
        self.head = nn.Linear(32, 64)
        self.transpose = transpose

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(x.transpose(0, 1) if self.transpose else x)


def _forward_ops(transpose: bool) -> list[str]:
    work = Workload(
        build_model=lambda: _Head(transpose),
        make_batch=lambda: torch.randn(8, 16, 32),
        loss_fn=lambda m, b: m(b).sum(),
        mode="infer",
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    return [
        trace.infos[e.info].op
        for e in trace.events[trace.steps_start :]
        if e.kind == "alloc" and trace.infos[e.info].phase == "step1.forward"
    ]


@pytest.mark.parametrize("transpose", [False, True])
def test_the_bias_is_added_without_a_second_output(transpose: bool) -> None:
    ops = _forward_ops(transpose)
    assert "add" not in ops
    outputs = [op for op in ops if op in ("addmm", "bmm", "mm")]
    assert len(outputs) == 1
