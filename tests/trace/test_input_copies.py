"""Copies CUDA kernels make of inputs not laid out as they run: a convolution's and a softmax's."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._layouts import channels_last, conv_memory_format
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload


def _work(model: nn.Module, batch: torch.Tensor, mode: str) -> Workload:
    return Workload(
        build_model=lambda: model,
        make_batch=lambda: batch,
        loss_fn=lambda m, b: m(b).float().sum(),
        optimizer="sgd",
        precision="fp32",
        mode=mode,
        steps=1,
    )


def _allocs(model: nn.Module, batch: torch.Tensor) -> list[tuple[str, int]]:
    """The (op or label, bytes) of every allocation of one inference step."""
    tr = trace_workload(_work(model, batch, "infer"), resolve_gpu("h200"))
    out = []
    for ev in tr.events[tr.steps_start :]:
        if ev.kind == "alloc" and ev.info is not None:
            out.append((tr.infos[ev.info].op, ev.size))
    return out


class _ChunkConv(nn.Module):
    """Convolves the first channels of a channels-last activation (efficientvit's cascade)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 1)

    def forward(self, x: torch.Tensor) -> Any:
        return self.conv(x.contiguous(memory_format=torch.channels_last)[:, :4])


class _TransposedConv1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> Any:
        return self.conv(x.transpose(1, 2))  # (N, L, C) read as (N, C, L)


def test_a_slice_of_channels_last_channels_suggests_channels_last() -> None:
    x = torch.empty(2, 8, 5, 5, device="meta").contiguous(memory_format=torch.channels_last)
    part = x[:, :4]
    assert channels_last(part) and not part.is_contiguous(memory_format=torch.channels_last)
    assert not channels_last(torch.empty(2, 8, 5, 5, device="meta")[:, :4])
    w = torch.empty(6, 4, 1, 1, device="meta")
    assert conv_memory_format(part, w) == torch.channels_last


def test_a_convolution_copies_an_input_not_laid_out_as_it_runs() -> None:
    allocs = _allocs(_ChunkConv(), torch.randn(16, 8, 6, 6))
    copies = [i for i, (op, _) in enumerate(allocs) if op == "convolution input copy"]
    assert copies and {allocs[i][1] for i in copies} == {16 * 4 * 6 * 6 * 4}
    # one per convolution (each step), made before its output
    assert all(allocs[i + 1][0] == "convolution" for i in copies)
    assert len(copies) == sum(op == "convolution" for op, _ in allocs)


def test_a_1d_convolution_copies_a_transposed_input() -> None:
    allocs = _allocs(_TransposedConv1d(), torch.randn(16, 32, 8))
    assert ("convolution input copy", 16 * 32 * 8 * 4) in allocs


def test_a_contiguous_input_is_not_copied() -> None:
    allocs = _allocs(nn.Sequential(nn.Conv2d(8, 6, 3), nn.Softmax(-1)), torch.randn(16, 8, 6, 6))
    assert not [op for op, _ in allocs if "copy" in op]


class _SoftmaxOfTransposed(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.softmax(x.transpose(1, 2), dim=-1)


def test_softmax_copies_a_non_contiguous_input_after_its_output() -> None:
    allocs = _allocs(_SoftmaxOfTransposed(), torch.randn(16, 64, 32))
    ops = [op for op, _ in allocs]
    i = ops.index("softmax contiguous input copy")
    assert allocs[i][1] == 16 * 64 * 32 * 4 and ops[i - 1] == "_softmax"


class _ConvLayerNormed(nn.Module):
    """A 1-d convolution normed over its channels through transposes (wav2vec-style feature
    extractors): the next convolution gets a transposed input and a transposed gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv1d(8, 16, 3, stride=2)
        self.norm = nn.LayerNorm(16)
        self.second = nn.Conv1d(16, 16, 2, stride=2)

    def forward(self, x: torch.Tensor) -> Any:
        y = self.norm(self.first(x).transpose(1, 2)).transpose(1, 2)
        return self.second(nn.functional.gelu(y))


def _train_events(model: nn.Module, batch: torch.Tensor) -> list[tuple[str, str, int]]:
    """(alloc or free, op or label of the block, bytes) of a training step, in order."""
    tr = trace_workload(_work(model, batch, "train"), resolve_gpu("h200"))
    labels = {}
    out = []
    for ev in tr.events[tr.steps_start :]:
        if ev.kind == "alloc" and ev.info is not None:
            labels[ev.block] = tr.infos[ev.info].op
        out.append((ev.kind, labels.get(ev.block, ""), ev.size))
    return out


def test_a_layer_norm_gives_a_contiguous_gradient_like_cuda() -> None:
    x = torch.empty(4, 16, 9, device="meta").transpose(1, 2)  # (4, 9, 16), transposed
    w = torch.empty(16, device="meta")
    from memfit.trace._layouts import cuda_layout

    aten = torch.ops.aten
    out = aten.native_layer_norm.default(x, [16], w, w, 1e-5)
    assert cuda_layout(aten.native_layer_norm.default, (x, [16], w, w, 1e-5), out)[
        0
    ].is_contiguous()
    args = (x, x, [16], out[1], out[2], w, w, [True, True, True])
    grads = aten.native_layer_norm_backward.default(*args)
    assert cuda_layout(aten.native_layer_norm_backward.default, args, grads)[0].is_contiguous()


def test_a_1d_convolution_backward_copies_its_transposed_input_and_gradient() -> None:
    events = _train_events(_ConvLayerNormed(), torch.randn(4, 8, 41))
    allocs = [(label, size) for kind, label, size in events if kind == "alloc"]
    # the second convolution's input (4 x 16 x 20) and gradient (4 x 16 x 10), in fp32
    assert ("convolution backward input copy", 4 * 16 * 20 * 4) in allocs
    assert ("cuDNN convolution backward grad_output copy", 4 * 16 * 10 * 4) in allocs
    # the first convolution's gradient comes back through the norm: transposed, copied too
    grads = [s for label, s in allocs if label == "cuDNN convolution backward grad_output copy"]
    assert 4 * 16 * 20 * 4 in grads
    # the input copy is made first and freed last
    i = next(k for k, (label, _) in enumerate(allocs) if label == "convolution backward input copy")
    assert allocs[i + 1][0] == "cuDNN convolution backward grad_output copy"
    frees = [label for kind, label, _ in events if kind == "free" and "backward" in label]
    first_input = frees.index("convolution backward input copy")
    assert frees[first_input - 1] == "cuDNN convolution backward grad_output copy"


class _Magnitude(nn.Module):
    """A log-magnitude spectrogram: ``abs`` of a complex STFT."""

    def forward(self, x: torch.Tensor) -> Any:
        window = torch.hann_window(64, device=x.device)
        spec = torch.stft(x, 64, 16, window=window, return_complex=True)
        return torch.log1p(spec.abs())


def test_abs_of_a_complex_tensor_takes_a_complex_temporary_after_its_output() -> None:
    allocs = _allocs(_Magnitude(), torch.randn(8, 4096))
    ops = [op for op, _ in allocs]
    i = ops.index("complex abs temporary")
    assert ops[i - 1] == "abs"
    assert allocs[i][1] == 2 * allocs[i - 1][1]  # complex64 beside its float32 magnitude


class _TransposedBatchNorm(nn.Module):
    """A batch norm over the channels of an (N, L, C) sequence through transposes (PatchTST),
    then a linear layer on the result: ``dtype`` float32 goes to cuDNN, bfloat16 does not."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(16).to(dtype)
        self.proj = nn.Linear(16, 16).to(dtype)

    def forward(self, x: torch.Tensor) -> Any:
        x = x.to(self.proj.weight.dtype)
        return self.proj(self.norm(x.transpose(1, 2)).transpose(1, 2))


def _lifetimes(model: nn.Module, batch: torch.Tensor) -> list[tuple[str, int, int, int]]:
    """(op or label, bytes, alloc position, free position or -1) of each block a training
    step allocates, in the order they were allocated."""
    tr = trace_workload(_work(model, batch, "train"), resolve_gpu("h200"))
    blocks: dict[int, list[Any]] = {}
    for pos, ev in enumerate(tr.events[tr.steps_start :]):
        if ev.kind == "alloc" and ev.info is not None:
            blocks[ev.block] = [tr.infos[ev.info].op, ev.size, pos, -1]
        elif ev.kind == "free" and ev.block in blocks and blocks[ev.block][3] < 0:
            blocks[ev.block][3] = pos
    return [tuple(b) for b in sorted(blocks.values(), key=lambda b: b[2])]  # type: ignore[misc]


def test_cudnns_batch_norm_runs_on_a_contiguous_copy_kept_for_the_backward() -> None:
    blocks = _lifetimes(_TransposedBatchNorm(torch.float32), torch.randn(8, 32, 16))
    nbytes = 8 * 32 * 16 * 4
    ops = [op for op, *_ in blocks]
    norm = ops.index("native_batch_norm")
    copy = blocks[norm - 1]  # the input made contiguous, just before the norm's output
    assert copy[:2] == ("clone", nbytes)
    grad = blocks[ops.index("native_batch_norm_backward")]
    assert copy[3] > grad[2]  # kept by autograd until the norm's backward has run
    # cuDNN's backward makes the transposed gradient contiguous first
    assert blocks[ops.index("native_batch_norm_backward") - 1][:2] == (
        "cuDNN batch norm backward gradient copy",
        nbytes,
    )
    # the norm's output is contiguous: after the transpose, the linear layer copies it
    after = [op for op, size, *_ in blocks[norm + 1 :] if size == nbytes]
    assert after[0] == "clone"


def test_a_batch_norm_cudnn_does_not_take_copies_nothing() -> None:
    blocks = _lifetimes(_TransposedBatchNorm(torch.bfloat16), torch.randn(8, 32, 16))
    ops = [op for op, *_ in blocks]
    assert blocks[ops.index("native_batch_norm") - 1][:2] != ("clone", 8 * 32 * 16 * 2)
    assert "cuDNN batch norm backward gradient copy" not in ops
