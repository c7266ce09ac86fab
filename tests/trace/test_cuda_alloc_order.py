"""Where CUDA kernels allocate in another order than the meta kernels the trace runs."""

from __future__ import annotations

import torch


def test_cuda_dropout_makes_its_mask_before_its_output():
    # torch's dropout_cuda allocates the bool mask, then the output (H200 traces: GPT-2-large
    # with checkpointing went from +2.21% to -0.04% reserved once the trace did the same)
    from memfit._gpus import resolve_gpu
    from memfit._workload import Workload
    from memfit.trace import trace_workload

    work = Workload(
        lambda: torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1)),
        lambda: torch.randn(512, 64),
        lambda m, x: m(x).sum(),
        optimizer="sgd",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    made = [
        (e.size, trace.infos[e.info].op)
        for e in trace.events
        if e.kind == "alloc" and trace.infos[e.info].op == "native_dropout"
    ]
    assert made[:2] == [(512 * 64, "native_dropout"), (512 * 64 * 4, "native_dropout")]
