"""Where CUDA kernels allocate in another order than the meta kernels the trace runs."""

from __future__ import annotations

import torch


def test_cuda_dropout_makes_its_mask_before_its_output():
    # torch's dropout_cuda allocates the bool mask, then the output (H200 traces: GPT-2-large
    # with checkpointing went from +2.21% to -0.04% reserved once the trace did the same)
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload._step import Workload

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


def _trace(build, batch, loss):
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload._step import Workload

    work = Workload(build, batch, loss, optimizer="sgd", steps=1)
    return trace_workload(work, resolve_gpu("h200"))


def _ops(trace):
    return [trace.infos[e.info].op for e in trace.events if e.kind == "alloc"]


def test_layer_norm_copies_a_permuted_input_first():
    # torchvision's ViT feeds ln_2 a (L, N, E)-ordered sum: CUDA's layer norm copies it to a
    # contiguous tensor before it allocates its output (H200 traces: ViT-B/16 fp32 -0.78% -> 0)
    norm = lambda: torch.nn.LayerNorm(64)  # noqa: E731
    permuted = _trace(norm, lambda: torch.randn(8, 4, 64).transpose(0, 1), lambda m, x: m(x).sum())
    plain = _trace(norm, lambda: torch.randn(4, 8, 64), lambda m, x: m(x).sum())
    ops = _ops(permuted)
    first = ops.index("layer norm contiguous input copy")
    assert ops[first + 1] == "native_layer_norm"  # the copy, then the output
    assert "layer norm contiguous input copy" not in _ops(plain)


def test_a_convolution_on_a_channels_last_input_stays_channels_last():
    # cuDNN keeps channels-last (cudnn_conv_suggest_memory_format); the meta kernel does not.
    # ConvNeXt's permuted LayerNorm input is then contiguous, as on the GPU: no copy
    from memfit.trace._layouts import cuda_layout

    aten = torch.ops.aten
    x = torch.empty(2, 8, 16, 16, device="meta").to(memory_format=torch.channels_last)
    w = torch.empty(8, 1, 7, 7, device="meta")
    args = (x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 8)
    out = cuda_layout(aten.convolution.default, args, aten.convolution.default(*args))
    assert out.is_contiguous(memory_format=torch.channels_last) and out.shape == (2, 8, 16, 16)
    assert out.permute(0, 2, 3, 1).is_contiguous()
    nchw = torch.empty(2, 8, 16, 16, device="meta")
    args = (nchw, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 8)
    assert cuda_layout(
        aten.convolution.default, args, aten.convolution.default(*args)
    ).is_contiguous()
