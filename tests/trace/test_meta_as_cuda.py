"""Two places where the trace must do what CUDA does rather than what the meta device does, found
by aligning H200 allocator traces (benchmarks/align.py) with the traced sequences."""

from __future__ import annotations

import torch
from torch import nn
from transformers.utils.generic import maybe_autocast

from memfit._gpus import resolve_gpu
from memfit.trace._tracer import Trace, trace_workload
from memfit.workload._step import Workload


def _allocs(trace: Trace) -> list[tuple[str, int, str]]:
    out = []
    for e in trace.events[trace.steps_start :]:
        if e.kind == "alloc" and e.info is not None:
            info = trace.infos[e.info]
            out.append((info.op, e.size, info.dtype))
    return out


class _Rotary(nn.Module):
    """transformers 5.17's Llama rotary embedding, reduced: float32 forced by disabling autocast
    for the input's device type (meta in a trace, cuda on the GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("inv_freq", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device).float()[None, None, :]
        with maybe_autocast(device_type=x.device.type, enabled=False):
            freqs = self.inv_freq[None, :, None].float() @ pos
        return self.proj(x) + freqs.transpose(1, 2).repeat(1, 1, 2).to(x.dtype)


def test_transformers_maybe_autocast_off_is_float32_on_the_meta_device_as_on_cuda() -> None:
    work = Workload(
        build_model=_Rotary,
        make_batch=lambda: torch.randn(2, 16, 8),
        loss_fn=lambda m, b: m(b).float().sum(),
        optimizer="sgd",
        precision="bf16-mixed",
        steps=1,
    )
    allocs = _allocs(trace_workload(work, resolve_gpu("h200")))
    # H200, tinyllama-bf16mixed-b1-s8192-ckpt under transformers 5.17: the rotary matmul's
    # output is float32 (2,097,152 bytes for 8,192 positions x 64), the trace had bf16 (half)
    matmul = [(s, d) for op, s, d in allocs if op in ("bmm", "mm", "matmul") and s in (128, 256)]
    assert matmul[0] == (1 * 4 * 16 * 4, "float32")  # inv_freq @ positions, (1, 4, 16)
    assert maybe_autocast.__module__ == "transformers.utils.generic"  # restored after the trace


def test_embedding_backward_copies_a_non_contiguous_gradient_first() -> None:
    b, s, d = 4, 6, 8
    work = Workload(
        build_model=lambda: nn.Embedding(100, d),
        make_batch=lambda: torch.randint(0, 100, (b, s)),
        loss_fn=lambda m, ids: m(ids).transpose(0, 1).contiguous().pow(2).sum(),
        optimizer="sgd",
        steps=1,
    )
    ops = [(op, size) for op, size, _ in _allocs(trace_workload(work, resolve_gpu("h200")))]
    # H200, lstm-lm-bf16mixed-b32-s512: the batch-first LSTM's input gradient arrives transposed;
    # CUDA's embedding backward copies it (67,108,864 bytes) before its 131,072,000-byte output
    copy = ops.index(("embedding backward contiguous grad", b * s * d * 4))
    assert ops[copy + 1][0] == "embedding_dense_backward"


def test_a_compiled_capture_sees_maybe_autocast_as_plain_autocast() -> None:
    """Dynamo 2.11 cannot trace ``torch.is_autocast_enabled("cpu")`` inside transformers 5.17's
    ``maybe_autocast`` (Llama's rotary embedding): the capture gets ``torch.autocast`` itself,
    the same region; the original is back afterwards."""
    import transformers.utils.generic as generic

    from memfit.trace._library_autocast import maybe_autocast_traceable

    original = generic.maybe_autocast
    with maybe_autocast_traceable():
        region = generic.maybe_autocast("cpu", enabled=False)
        assert isinstance(region, torch.autocast) and not region._enabled
        assert generic.maybe_autocast.__wrapped__ is original  # type: ignore[attr-defined]
    assert generic.maybe_autocast is original


class _Patches(nn.Module):
    """A ViT's patch embedding, reduced: a strided convolution with a bias, its output flattened
    and transposed to tokens, a float32 class token joined in front of them."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 64, 4, stride=4)
        self.cls = nn.Parameter(torch.zeros(1, 1, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.proj(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], dim=1)


def _patch_trace(build: type[nn.Module] = _Patches) -> Trace:
    work = Workload(
        build_model=build,
        make_batch=lambda: torch.randn(64, 3, 64, 64),
        loss_fn=lambda m, b: m(b).float().pow(2).sum(),
        optimizer="sgd",
        precision="bf16-mixed",
        steps=1,
    )
    return trace_workload(work, resolve_gpu("h200"))


def test_a_transposed_gradient_is_copied_and_the_bias_gradient_summed_as_on_the_gpu() -> None:
    allocs = _allocs(_patch_trace())
    ops = [op for op, _, _ in allocs]
    grad = 64 * 64 * 16 * 16 * 2  # the bf16 gradient of the convolution's output
    # H200, ViT-B/16 b128 bf16-mixed (2026-12-02): cuDNN's backward copies grad_output, which
    # arrives channels-last through the transpose, to the input's contiguous layout (38.5 MB),
    # and PyTorch sums the bias gradient over the channels-last gradient (138 MB of partials)
    assert ("cuDNN convolution backward grad_output copy", grad, "") in [
        (op, size, "") for op, size, _ in allocs
    ]
    copy = ops.index("cuDNN convolution backward grad_output copy")
    assert ops.index("reduction partial results", copy) > ops.index("convolution_backward", copy)


class _Tokens(nn.Module):
    """A ViT's patch embedding and its first layer norm: the convolution's output read back
    through a transpose, so its gradient arrives channels-last."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, 64, 4, stride=4)
        self.norm = nn.LayerNorm(64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


def test_the_weight_gradient_of_a_transposed_convolution_output_is_kept_as_the_grad() -> None:
    # torch 2.11's meta backward lays the weight gradient out as its channels-last grad_output
    # (2.14's does not); cuDNN as the contiguous input and weight, so autograd keeps it as .grad:
    # one float32 buffer,
    # no second one in the weight's layout (H200, ViT-B/16 b128 bf16-mixed, 2026-12-03: the
    # GPU's 2,359,296 bytes once; reserved 5.2% over the estimate without it)
    allocs = _allocs(_patch_trace(_Tokens))
    weight = 64 * 3 * 4 * 4 * 4  # the convolution's weight gradient in float32
    made = [op for op, size, _ in allocs if size == weight]
    assert made == ["_to_copy", "clone"]  # the gradient, then SGD's momentum buffer


def test_cat_promotes_without_a_cast_copy_under_autocast() -> None:
    # torch 2.11's autocast does not list cat among the ops it promotes (AT_FORALL_PROMOTE):
    # the float32 class token and the bf16 tokens are joined by cat itself
    allocs = _allocs(_patch_trace())
    forward = allocs[: next(i for i, a in enumerate(allocs) if a[0] == "cat") + 1]
    assert forward[-1][2] == "float32"
    assert not [a for a in forward if a[0] == "_to_copy" and a[1] == 64 * 256 * 64 * 4]


class _HostParameter(nn.Module):
    """A parameter made by a legacy constructor, which ignores the build's device (wav2vec2's
    ``masked_spec_embed = nn.Parameter(torch.Tensor(hidden).uniform_())``)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.embed = nn.Parameter(torch.Tensor(64).uniform_())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.embed


def test_a_parameter_made_on_the_host_is_on_the_gpu_as_model_to_cuda_leaves_it() -> None:
    work = Workload(
        build_model=_HostParameter,
        make_batch=lambda: torch.randn(8, 64),
        loss_fn=lambda m, b: m(b).sum(),
        optimizer="sgd",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    params = [i for i in trace.infos if i.category.value == "parameter"]
    assert sorted(i.shape for i in params) == [(64,), (64,), (64, 64)]
