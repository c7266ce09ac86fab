"""A random number drawn on the host in a step (transformers' layer drop) is answered at the
top of its range: every layer runs, the most a step holds, and the estimate says so."""

from __future__ import annotations

import torch

from memfit._gpus import resolve_gpu
from memfit.trace._function_mode import RANDOM_NOTE
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload


class _LayerDrop(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            if self.training and torch.rand([]) < 0.9:  # as transformers' layerdrop
                continue
            x = layer(x)
        return x


def test_layer_drop_keeps_every_layer_and_says_so() -> None:
    work = Workload(
        build_model=_LayerDrop,
        make_batch=lambda: torch.randn(512, 256),
        loss_fn=lambda m, b: m(b).sum(),
        optimizer="sgd",
        mode="train",
    )
    trace = trace_workload(work, resolve_gpu("h100"))
    outputs = [
        trace.infos[e.info].module
        for e in trace.events
        if e.kind == "alloc"
        and e.info is not None
        and trace.infos[e.info].op == "addmm"
        and trace.infos[e.info].phase == "step1.forward"
    ]
    assert len(outputs) == 8
    assert RANDOM_NOTE in trace.notes
