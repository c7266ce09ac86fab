"""Memory that real CUDA kernels take and meta kernels do not.

* cuBLAS keeps one workspace per handle and stream, taken from the caching allocator at the
  first matmul and never returned. PyTorch gives each thread its own handle, and the autograd
  engine runs the backward pass on its own thread, so a training step holds two.
* Fused attention's backward: cuDNN's (Hopper) one workspace for a float32 dQ accumulator and
  the softmax row sums; flash attention's and the memory-efficient kernel's
  (``_attention_kernels``).
* cuDNN convolutions take a workspace per call, sized by the engine cuDNN picks (``_cudnn``).

Sizes were read from real traces on an H200 with torch 2.11 (benchmarks/results/).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import torch

from memfit._gpus import Architecture
from memfit._units import MiB
from memfit.trace._attention_kernels import (
    FLASH_BACKWARD,
    efficient_backward_copies,
    efficient_backward_scratch,
    flash_backward_copies,
    flash_backward_scratch,
)
from memfit.trace._cudnn import ConvWorkspaces
from memfit.trace._fake_kernels import scratch as fake_scratch
from memfit.trace._fake_kernels import temporaries
from memfit.trace._group_norm import GROUP_NORM_OPS, group_norm_scratch
from memfit.trace._layouts import channels_last
from memfit.trace._loss_kernels import LOSS_OPS, loss_copies, loss_scratch
from memfit.trace._reduce import reduction_scratch
from memfit.trace._scratch import SORTS, Scratch, sort_scratch

__all__ = ["RULE_OPS", "KernelModel", "Scratch"]

aten = torch.ops.aten

_CUBLAS_OPS = {
    aten.mm.default,
    aten.addmm.default,
    aten.bmm.default,
    aten.baddbmm.default,
    aten.addmv.default,
    aten.mv.default,
    aten.addbmm.default,
    aten._addmm_activation.default,
    aten.mm.out,
    aten.addmm.out,
    aten.bmm.out,
}


_HALF = (torch.float16, torch.bfloat16)
_EFFICIENT_BACKWARD = frozenset(
    {
        aten._scaled_dot_product_efficient_attention_backward.default,
        aten._efficient_attention_backward.default,
    }
)
_FULL_REDUCTIONS = {aten.sum.default, aten.mean.default}
_REDUCTIONS = {
    aten.sum.dim_IntList,
    aten.mean.dim,
    aten.amax.default,
    aten.amin.default,
    aten.linalg_vector_norm.default,
    *_FULL_REDUCTIONS,
}


def _embedding_backward_scratch(args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """CUDA's embedding backward for more than 3,072 indices sorts them and sums the rows of
    each partial segment (at most 10 rows) in float32 first: a buffer of (n / 10 + min(n,
    vocabulary)) rows (H200 traces, torch 2.11: 73,818,112 bytes for TinyLlama's 8,192 tokens
    of width 2,048; 55,363,584 for BERT-base's 16,384 of width 768)."""
    grad, indices, num_weights = args[0], args[1], int(args[2])
    n = indices.numel()
    if n <= 3072:
        return []  # a direct kernel, no scratch
    rows = n // 10 + min(n, num_weights)
    return [(rows * int(grad.shape[-1]) * 4, "embedding backward partial sums (float32)")]


def _multinomial_scratch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[int, str]]:
    """CUDA's ``multinomial`` of one sample, or without replacement (``multinomial_out`` in
    ATen's Distributions.cpp), after it sizes its output: checks the probabilities (``aminmax``,
    a row sum: a few bytes), then samples by the Gumbel-max trick, ``q = empty_like(probs)
    .exponential_()``, ``q = probs / q`` in place, ``argmax`` (one sample) or ``topk`` (several,
    into a values tensor of the output's size) of ``q``; all freed when it returns. A buffer the
    size of the probabilities: 19 MiB for 32 rows over Qwen2's 151,936 ids in float32."""
    probs, n = args[0], int(args[1])
    replacement = args[2] if len(args) > 2 else kwargs.get("replacement", False)
    if replacement and n > 1:
        return []  # the sampling kernel itself: no scratch
    size = probs.element_size()
    out = [(probs.numel() * size, "multinomial sampling noise (the probabilities' size)")]
    if n > 1:
        rows = probs.numel() // max(int(probs.shape[-1]), 1)
        out.append((rows * n * size, "multinomial top-k values"))
    return out


def _pow_scalar_scratch(args: tuple[Any, ...]) -> list[tuple[int, str]]:
    """``pow(scalar, tensor)`` on CUDA (Pow.cpp's ``pow_Scalar_out``): the base made a tensor
    on the GPU (``wrapped_scalar_tensor``: double, int64, bool or complex double) once the output
    is allocated, freed when it returns; none for a base of 1, which fills the output (H100
    op sweep, torch 2.11: 8 bytes in ``ldexp`` and in ``logaddexp2``'s backward)."""
    base = args[0]
    if base == 1:
        return []
    size = 16 if isinstance(base, complex) else 1 if isinstance(base, bool) else 8
    return [(size, "pow's scalar base on the GPU")]


def _fused_backward_workspace(q: torch.Tensor, k: torch.Tensor) -> tuple[int, str]:
    """cuDNN's fused attention backward workspace: one buffer for the fp32 dq accumulator and
    the softmax sums, 256 bytes beyond both, and with grouped-query attention the per-query-head
    dK and dV (summed into the key/value heads after). H200 traces, torch 2.11: 51,118,336 =
    50,331,648 + 786,432 + 256 for GPT-2 b16 s1024; 135,266,560 = 68,157,696 + 2 x 33,554,432
    for TinyLlama b4 s2048 (32 query heads, 4 key/value heads)."""
    b, h, s, d = (int(x) for x in q.shape)
    size = b * s * h * d * 4 + b * h * s * 4 + 256
    label = "fused attention backward workspace (dQ accumulator, softmax sums)"
    if int(k.shape[1]) != h:
        size += 2 * b * s * h * d * k.element_size()
        label += ", expanded dK and dV"
    return size, label


def _flattens_as_view(t: torch.Tensor) -> bool:
    """Whether ``t.reshape(-1)`` is a view: each dimension of more than one element steps over
    the ones inside it exactly."""
    dims = [(n, st) for n, st in zip(t.shape, t.stride(), strict=True) if n != 1]
    return all(outer[1] == inner[1] * inner[0] for outer, inner in itertools.pairwise(dims))


# the ops a rule of :class:`KernelModel` may add copies or scratch to (``copies_first``,
# ``scratch``, ``between_outputs``): a trace that logs its kernel calls (``_kernel_calls``)
# logs each of these, at a batch where it adds nothing too, so that its rule can be asked again
# at another batch (``_batch_model``)
RULE_OPS = frozenset(
    {
        aten.native_layer_norm.default,
        aten.native_layer_norm_backward.default,
        aten.convolution.default,
        aten.convolution_backward.default,
        aten.embedding.default,
        aten.embedding_dense_backward.default,
        *_EFFICIENT_BACKWARD,
        *FLASH_BACKWARD,
        *LOSS_OPS,
        *GROUP_NORM_OPS,
        aten._scaled_dot_product_cudnn_attention_backward.default,
        aten._softmax_backward_data.default,
        aten.multinomial.default,
        aten.pow.Scalar,
        *SORTS,
        *_REDUCTIONS,
    }
)


class KernelModel:
    """Workspaces of the kernels a real GPU of compute capability ``sm`` would run."""

    def __init__(
        self,
        sm: int,
        cublas_workspace: int | None = None,
        sm_count: int = 132,
        threads_per_sm: int = 2048,
    ) -> None:
        self.sm = sm
        self.sm_count = sm_count
        self.threads_per_sm = threads_per_sm
        arch = Architecture(sm)
        if cublas_workspace is None:
            cublas_workspace = arch.cublas_workspace
        self.cublas_workspace = cublas_workspace
        self._handles: set[str] = set()
        self.convolutions = ConvWorkspaces(arch.cudnn_table)

    def before(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], phase: str
    ) -> Iterable[tuple[int, str]]:
        """Persistent allocations a kernel triggers the first time it runs on a thread."""
        if func in _CUBLAS_OPS:
            thread = "backward" if phase.endswith("backward") else "main"
            out: list[tuple[int, str]] = []
            if thread not in self._handles:
                self._handles.add(thread)
                out.append((self.cublas_workspace, f"cublas workspace ({thread} thread)"))
            lt = f"lt-{thread}"
            if func is aten.addmm.default and lt not in self._handles:
                # addmm with a bias goes through cublasLt (gemm_and_bias), which takes a
                # 1 MiB workspace of its own (H200 traces, torch 2.11: fp32 and bf16 alike)
                self._handles.add(lt)
                out.append((MiB, f"cublasLt workspace ({thread} thread)"))
            return out
        return ()

    def copies_first(self, func: Any, args: tuple[Any, ...]) -> list[tuple[int, str]]:
        """Copies a kernel makes of its inputs before it allocates its outputs, freed when it
        ends: layer norm runs on a contiguous input (``expect_contiguous``), so a permuted
        one (torchvision's ViT adds attention output in (L, N, E) order) is copied first; so
        does CUDA's embedding backward with its gradient. Ops memfit runs through kernels of
        its own (``_fake_kernels``) allocate their temporaries here too (CTC loss's lengths
        and log_beta, nms's sort and IoU mask)."""
        if func in (aten.native_layer_norm.default, aten.native_layer_norm_backward.default):
            x = args[0] if func is aten.native_layer_norm.default else args[1]
            if isinstance(x, torch.Tensor) and not x.is_contiguous():
                return [(x.numel() * x.element_size(), "layer norm contiguous input copy")]
        if func is aten.convolution_backward.default:
            grad = _conv_grad_copy(args)
            if grad:
                return [(grad, "cuDNN convolution backward grad_output copy")]
        if func is aten.embedding.default:
            # at::embedding flattens its indices with reshape: a copy where they do not flatten
            # as a view (BERT's token type ids, a buffer expanded over the batch: H200 traces,
            # torch 2.11, 262,144 bytes at 64 x 512 before the output, freed after it)
            ids = args[1]
            if isinstance(ids, torch.Tensor) and not _flattens_as_view(ids):
                return [(ids.numel() * ids.element_size(), "embedding indices flattened")]
        if func is aten.embedding_dense_backward.default:
            # Embedding.cu: grad_.contiguous() before anything else; a batch-first LSTM's input
            # gradient arrives transposed (H200, lstm-lm-bf16mixed-b32-s512: 67,108,864 bytes
            # before the sort buffers and the 131,072,000-byte weight gradient)
            grad = args[0]
            if isinstance(grad, torch.Tensor) and not grad.is_contiguous():
                return [(grad.numel() * grad.element_size(), "embedding backward contiguous grad")]
        if func in _EFFICIENT_BACKWARD:
            return efficient_backward_copies(func, args)
        if func in FLASH_BACKWARD:
            return flash_backward_copies(func, args)
        if func in LOSS_OPS:
            return loss_copies(func, args)
        return temporaries(func, args)

    def scratch(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[list[Scratch]]:
        """Allocations a kernel makes and frees within itself, as groups that live one after
        another (a convolution's backward frees the input gradient's workspace before it takes
        the weight gradient's); a ``held`` one lives on into the next group."""
        if func is aten.convolution.default:
            workspaces: list[list[Scratch]] = [
                [(n, "cuDNN convolution workspace")] for n in self.convolutions.forward(args)
            ]
            return workspaces
        if func in _EFFICIENT_BACKWARD:
            return efficient_backward_scratch(func, args, kwargs)
        if func in SORTS:
            return sort_scratch(args, kwargs)
        if func in LOSS_OPS:
            return loss_scratch(func, args, self._reduction)
        if func in GROUP_NORM_OPS:
            return group_norm_scratch(func, args)
        own = fake_scratch(func, args, kwargs)
        if own:
            return own
        together: list[Scratch] = list(self._scratch(func, args, kwargs))
        return [together] if together else []

    def between_outputs(
        self, func: Any, args: tuple[Any, ...]
    ) -> dict[int, list[tuple[int, str]]] | None:
        """Scratch a kernel takes between making one output and the next, by the index of the
        output it follows (cuDNN's backward: input gradient, its workspace, weight gradient,
        its workspace, bias gradient, its reduction's scratch); None for kernels that allocate
        all outputs first."""
        if func is not aten.convolution_backward.default:
            return None
        what = ("input gradient workspace", "weight gradient workspace", "bias gradient sum")
        out = {
            i: [(n, f"cuDNN convolution {what[i]}") for n in sizes]
            for i, sizes in self.convolutions.backward(args).items()
        }
        if args[10][2] and not out.get(2):  # the bias gradient: grad_output.sum((0, 2, 3))
            out[2] = self._reduction(args[0], (0, 2, 3))
        return out

    def copies_freed_after(self, func: Any) -> int | None:
        """The output after which a kernel's :meth:`copies_first` are freed (None: when it
        ends): cuDNN's backward lets its copy of grad_output go before the bias gradient,
        which PyTorch sums outside cuDNN."""
        return 1 if func is aten.convolution_backward.default else None

    def _scratch(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Iterable[tuple[int, str]]:
        if func in FLASH_BACKWARD:
            return flash_backward_scratch(func, args)
        if func is aten._scaled_dot_product_cudnn_attention_backward.default:
            # neither the sequence nor the head dim padded; H200 traces, torch 2.11: 20,500,736
            # = 128 x 8 x 77 x 64 x 4 + 128 x 8 x 77 x 4 + 256 for CLIP ViT-B/32's 77-token
            # text tower (b128); compiled GPT-2 b8 s1024: 25,559,296 per layer; H100 op sweep:
            # 1,984 = 4 x 4 x 3 x 8 x 4 + 4 x 4 x 3 x 4 + 256 for head dim 8
            q = args[1]
            return [_fused_backward_workspace(q, args[2])]
        if func is aten.embedding_dense_backward.default:
            return _embedding_backward_scratch(args)
        if func is aten._softmax_backward_data.default:
            # SoftMax.cu multiplies the gradient by the output into a temporary once the input
            # gradient is allocated (H200 traces, torch 2.11: one scores-sized tensor after every
            # attention's softmax backward, Qwen2.5-0.5B and TinyLlama-1.1B in float32)
            grad, output = args[0], args[1]
            size = grad.numel() * torch.promote_types(grad.dtype, output.dtype).itemsize
            return [(size, "softmax backward grad x output")]
        if func is aten.multinomial.default:
            return _multinomial_scratch(args, kwargs)
        if func is aten.pow.Scalar:
            return _pow_scalar_scratch(args)
        if func is aten.native_layer_norm_backward.default:
            grad = args[0]  # made contiguous after the gradients are allocated
            if isinstance(grad, torch.Tensor) and not grad.is_contiguous():
                return [(grad.numel() * grad.element_size(), "layer norm contiguous grad copy")]
        if func in _REDUCTIONS:
            dims = args[1] if len(args) > 1 and func not in _FULL_REDUCTIONS else None
            if func is aten.linalg_vector_norm.default:
                dims = args[2] if len(args) > 2 else kwargs.get("dim")
            return self._reduction(args[0], dims)
        return ()

    def _reduction(self, x: torch.Tensor, dims: Any) -> list[tuple[int, str]]:
        """A CUDA reduction's partial results and semaphores (none for one within blocks)."""
        scratch = reduction_scratch(x, dims, self.sm_count, self.threads_per_sm)
        if scratch is None:
            return []
        return [(scratch[0], "reduction partial results"), (scratch[1], "reduction semaphores")]


def _conv_grad_copy(args: tuple[Any, ...]) -> int:
    """Bytes of the copy cuDNN's convolution backward makes of grad_output when it is not laid
    out in the memory format the convolution runs in (channels-last if the input or the weight
    is, else contiguous): ``grad_output.contiguous(memory_format)`` in cudnn's backward. ViT's
    patch embedding gets its gradient back through a transpose (H200, ViT-B/16 b128 bf16: a
    38,535,168-byte copy); 0 when none is made."""
    grad, x, weight = args[0], args[1], args[2]
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (grad, x, weight)):
        return 0
    if bool(args[7]) or any(int(d) != 1 for d in args[6]):  # transposed, dilated: not measured
        return 0
    fmt = (
        torch.channels_last
        if channels_last(x) or channels_last(weight)
        else torch.contiguous_format
    )
    if grad.is_contiguous(memory_format=fmt):
        return 0
    return int(grad.numel() * grad.element_size())
