"""Memory that real CUDA kernels take and meta kernels do not.

* cuBLAS keeps one workspace per handle and stream, taken from the caching allocator at the
  first matmul and never returned. PyTorch gives each thread its own handle, and the autograd
  engine runs the backward pass on its own thread, so a training step holds two.
* Fused attention's backward: cuDNN's (Hopper) one workspace for a float32 dQ accumulator and
  the softmax row sums; flash attention's and the memory-efficient kernel's
  (``_attention_kernels``).
* cuDNN convolutions take a workspace per call, sized by the engine cuDNN picks (``_cudnn``).
* cuFFT's plans take input copies and a workspace per call (``_spectral``); distance
  backwards a per-pair buffer, Cholesky solves a copy of the factor (``_linalg``).

Sizes were read from real traces on an H200 with torch 2.11 (benchmarks/results/).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from memfit._gpus import Architecture
from memfit._units import MiB
from memfit.trace._attention_kernels import (
    FLASH_BACKWARD,
    efficient_backward_copies,
    efficient_backward_scratch,
    efficient_forward_scratch,
    flash_backward_copies,
    flash_backward_scratch,
)
from memfit.trace._bnb_kernels import GEMM_4BIT, gemm_4bit_temporaries
from memfit.trace._conv_copies import (
    conv_backward_input_copy,
    conv_grad_copy,
    conv_input_copy,
    conv_weight_copy,
)
from memfit.trace._cudnn import ConvWorkspaces
from memfit.trace._cudnn_batch_norm import cudnn_batch_norm_grad_copy
from memfit.trace._deform_conv import deform_scratch, deform_temporaries, is_deform
from memfit.trace._embedding_backward import EMBEDDING_BACKWARDS, embedding_backward_scratch
from memfit.trace._fake_kernels import scratch as fake_scratch
from memfit.trace._fake_kernels import temporaries
from memfit.trace._group_norm import GROUP_NORM_OPS, group_norm_scratch
from memfit.trace._index_put import ACCUMULATING_PUTS, index_put_scratch
from memfit.trace._layouts import (
    NORMS_OF_CONTIGUOUS,
    RESIZED_FROM_INPUT,
)
from memfit.trace._linalg import LINALG_OPS, linalg_scratch
from memfit.trace._loss_kernels import LOSS_OPS, loss_copies, loss_scratch
from memfit.trace._nonzero import NONZERO_STATIC, nonzero_static_scratch
from memfit.trace._operand_copies import BMMS, bmm_operand_copies
from memfit.trace._reduce import (
    REDUCE_OPS,
    reduce_op_scratch,
    reduction_scratch,
    renorm_scratch,
)
from memfit.trace._scratch import (
    SORTS,
    Nested,
    Order,
    Scratch,
    chunk_cat_metadata,
    scan_storage,
    segment_reduce_scratch,
    sort_scratch,
)
from memfit.trace._spectral import FFT_OPS, fft_scratch, roll_temporaries

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
_EFFICIENT_FORWARD = frozenset(
    {
        aten._scaled_dot_product_efficient_attention.default,
        aten._efficient_attention_forward.default,
    }
)


def _index_copies(indices: list[Any]) -> list[tuple[int, str]]:
    """CUDA's advanced indexing (``AdvancedIndex`` in ATen's TensorAdvancedIndexing.cpp)
    broadcasts two or more index tensors to one shape and, unless their strides then all
    match, makes each contiguous: a copy of each broadcast one, before the output (H100
    traces, torch 2.11: indices of 160 x 1 x 1, 1 x 160 x 1 and 1 x 1 x 160 int64, three
    32,768,000-byte copies freed after the output). Masks are positions by then."""
    defined = [i for i in indices if isinstance(i, torch.Tensor)]
    if len(defined) < 2 or any(i.dtype in (torch.bool, torch.uint8) for i in defined):
        return []
    shape = torch.broadcast_shapes(*(i.shape for i in defined))
    expanded = [i.expand(shape) for i in defined]
    if all(e.stride() == expanded[0].stride() for e in expanded):
        return []
    return [
        (e.numel() * e.element_size(), "index made contiguous")
        for e in expanded
        if not e.is_contiguous()
    ]


def _masked_scatter_scratch(args: tuple[Any, ...]) -> list[list[Scratch]]:
    """CUDA's ``masked_scatter_`` (``masked_scatter_cuda_impl``) finds where each source
    element goes by an int64 prefix sum of the mask, broadcast to ``self`` and made contiguous
    (a copy unless it already is), through cub's scan storage; all freed last-first when it
    returns (H100 traces, torch 2.11: 640 x 640 bfloat16 with a 640 mask row, 3,276,800,
    409,600 and 8,447 bytes)."""
    out, mask = args[0], args[1]
    n = out.numel()
    if n == 0:
        return []
    held: list[Scratch] = [(8 * n, "masked scatter mask prefix sum", True)]
    if tuple(mask.shape) != tuple(out.shape) or not mask.is_contiguous():
        held.append((n * mask.element_size(), "masked scatter mask made contiguous", True))
    return [held, [(scan_storage(n), "cub scan storage")]]


_SCATTER_REDUCES = frozenset({aten.scatter_reduce.two, aten.scatter_reduce_.two})
_MEAN_REDUCES = _SCATTER_REDUCES | {aten.index_reduce.default, aten.index_reduce_.default}


def _reduce_mean_scratch(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[list[Scratch]]:
    """``scatter_reduce`` and ``index_reduce`` with ``reduce="mean"`` count what each output
    element received once the sums are in (TensorAdvancedIndexing.cpp, Indexing.cu): ones like
    the source summed into counts like the output (``scatter_reduce`` holds both; ``index_reduce``
    frees the ones after adding them), then ``counts == 0`` (a bool a count) to fill the empty
    ones; counts and ones are freed last-first when the kernel returns (H100 traces, torch 2.11,
    bfloat16)."""
    reduce = args[4] if len(args) > 4 else kwargs.get("reduce")
    out, source = args[0], args[3]
    if reduce != "mean" or not all(isinstance(t, torch.Tensor) for t in (out, source)):
        return []
    counts: Scratch = (
        out.numel() * out.element_size(),
        f"{func.overloadpacket.__name__} counts",
        True,
    )
    ones = source.numel() * source.element_size()
    first: list[Scratch] = (
        [(ones, "mean reduce ones like the source", True), counts]
        if func in _SCATTER_REDUCES
        else [counts, (ones, "mean reduce ones like the source")]
    )
    return [first, [(out.numel(), "mean reduce empty counts mask")]]


def _mode_scratch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[int, str]]:
    """CUDA's ``mode`` (TensorModeKernel.cpp) moves the reduced dim last and makes the input
    contiguous after it allocates its outputs: a copy of the input unless the dim is already
    last (H100 traces, torch 2.11: mode over dim 1 of 80 x 80 x 80 float32, 2,048,000 bytes
    after the values and indices, freed when the kernel ends)."""
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.numel() == 0:
        return []
    if int(x.shape[dim]) == 1 or x.transpose(dim, -1).is_contiguous():
        return []
    return [(x.numel() * x.element_size(), "mode input made contiguous, its dim last")]


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


_BERNOULLI_P = {aten.bernoulli.default: 0, aten.bernoulli_.Tensor: 1}


def _bernoulli_scratch(out: torch.Tensor, p: Any) -> list[tuple[int, str]]:
    """CUDA's ``bernoulli`` with a tensor of probabilities samples from them in float32
    (float64 for a float64 output): a copy in that dtype once the output is allocated, none
    where they are in it already (H100 op sweep, torch 2.11: 12 bytes for 3 bfloat16 ones)."""
    if not isinstance(p, torch.Tensor) or not isinstance(out, torch.Tensor):
        return []
    want = torch.float64 if out.dtype == torch.float64 else torch.float32
    if p.dtype == want:
        return []
    return [(p.numel() * want.itemsize, "bernoulli probabilities in float")]


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


def _complex(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_complex()


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
        aten.abs.default,
        aten.angle.default,
        aten.native_layer_norm.default,
        aten.native_layer_norm_backward.default,
        aten.convolution.default,
        aten.convolution_backward.default,
        aten.embedding.default,
        *EMBEDDING_BACKWARDS,
        *_EFFICIENT_BACKWARD,
        *FLASH_BACKWARD,
        *LOSS_OPS,
        *GROUP_NORM_OPS,
        aten._scaled_dot_product_cudnn_attention_backward.default,
        aten._softmax.default,
        aten._log_softmax.default,
        aten._softmax_backward_data.default,
        aten.multinomial.default,
        aten.mode.default,
        aten.unfold_backward.default,
        aten.masked_scatter_.default,
        aten.index.Tensor,
        *ACCUMULATING_PUTS,
        *_MEAN_REDUCES,
        *RESIZED_FROM_INPUT,
        aten.roll.default,
        *FFT_OPS,
        *LINALG_OPS,
        aten.pow.Scalar,
        *SORTS,
        *REDUCE_OPS,
        aten.renorm.default,
        *BMMS,
    }
)


SEGMENT_REDUCES = frozenset({aten.segment_reduce.default, aten._segment_reduce_backward.default})
_HELD_TO_END = frozenset(
    {
        *SEGMENT_REDUCES,
        *SORTS,
        *ACCUMULATING_PUTS,
        aten.masked_scatter_.default,
        *_MEAN_REDUCES,
        *EMBEDDING_BACKWARDS,
    }
)
_HELD_AFTER = frozenset({aten.renorm.default, *BMMS})
# C++ locals, freed last first, what a group holds before the next group's own
_LAST_FIRST = frozenset(
    {*_EFFICIENT_BACKWARD, *FLASH_BACKWARD, *LOSS_OPS, *GROUP_NORM_OPS, NONZERO_STATIC}
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
        self.convolutions = ConvWorkspaces(arch.cudnn_table, arch.sm)

    def before(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], phase: str
    ) -> Iterable[tuple[int, str]]:
        """Persistent allocations a kernel triggers the first time it runs on a thread."""
        if func in _CUBLAS_OPS or is_deform(func):
            # autograd runs a CUDA backward on a device thread of its own, a gradient taken
            # inside the forward (a gradient penalty's autograd.grad) too (H100, WGAN-GP)
            backward = phase.endswith("backward") or torch._C._current_autograd_node() is not None
            thread = "backward" if backward else "main"
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

    def copies_first(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
    ) -> list[tuple[int, str]]:
        """Copies a kernel makes of its inputs before it allocates its outputs, freed when it
        ends: layer norm and the fused RMS norm run on a contiguous input
        (``expect_contiguous``), so a permuted one (torchvision's ViT adds attention output in
        (L, N, E) order; AIMv2 normalizes its patch embedding transposed) is copied first; so
        does CUDA's embedding backward with its gradient. Ops memfit runs through kernels of
        its own (``_fake_kernels``) allocate their temporaries here too (CTC loss's lengths
        and log_beta, nms's sort and IoU mask); bitsandbytes' 4-bit product its dequantized
        weight (``_bnb_kernels``)."""
        if is_deform(func):
            return deform_temporaries(func, args)
        if getattr(func, "namespace", None) == "bitsandbytes" and func.name() == GEMM_4BIT:
            gpu = (self.sm_count, self.sm // 10, self.sm % 10)
            return gemm_4bit_temporaries(args, kwargs or {}, gpu)
        if func in NORMS_OF_CONTIGUOUS:
            x = args[NORMS_OF_CONTIGUOUS[func]]
            if isinstance(x, torch.Tensor) and not x.is_contiguous():
                return [(x.numel() * x.element_size(), "layer norm contiguous input copy")]
        if func is aten.native_batch_norm_backward.default:
            copy = cudnn_batch_norm_grad_copy(args)
            if copy:
                return [(copy, "cuDNN batch norm backward gradient copy")]
        if func is aten.angle.default and _complex(args[0]):
            # angle of a complex tensor: the complex temporary of abs's rule (UnaryOps.cpp),
            # made before the float output, which angle_out sizes afterwards (read from the
            # source; abs's is the one measured)
            return [(args[0].numel() * args[0].element_size(), "complex angle temporary")]
        if func is aten.convolution.default:
            made = [
                (conv_weight_copy(args), "convolution weight copy"),
                (conv_input_copy(args), "convolution input copy"),
            ]
            return [(nbytes, label) for nbytes, label in made if nbytes]
        if func is aten.convolution_backward.default:
            made = [
                (conv_backward_input_copy(args), "convolution backward input copy"),
                (conv_grad_copy(args), "cuDNN convolution backward grad_output copy"),
            ]
            return [(nbytes, label) for nbytes, label in made if nbytes]
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
        if func is aten.index.Tensor:
            return _index_copies(args[1])
        if func in RESIZED_FROM_INPUT:
            x = args[0]
            size = x.numel() * x.element_size()
            out = func(*args)
            if out.numel() * out.element_size() > size:
                return [(size, f"{func.overloadpacket.__name__} output before its resize")]
        if func is aten.roll.default:
            return roll_temporaries(args, {})
        if func in _EFFICIENT_BACKWARD:
            return efficient_backward_copies(func, args)
        if func in FLASH_BACKWARD:
            return flash_backward_copies(func, args)
        if func in LOSS_OPS:
            return loss_copies(func, args)
        return temporaries(func, args, kwargs)

    def scratch(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Sequence[list[Scratch] | Nested]:
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
        if is_deform(func):
            return deform_scratch(func, args)
        if func in SORTS:
            return sort_scratch(args, kwargs)
        if func is aten.renorm.default:
            return renorm_scratch(args, self.sm_count, self.threads_per_sm)
        if func in _MEAN_REDUCES:
            return _reduce_mean_scratch(func, args, kwargs)
        if func is aten.masked_scatter_.default:
            return _masked_scatter_scratch(args)
        if func in ACCUMULATING_PUTS:
            return index_put_scratch(func, args, kwargs, self._int64_reduction)
        if func in SEGMENT_REDUCES:
            return segment_reduce_scratch(kwargs)
        if func in EMBEDDING_BACKWARDS:
            return embedding_backward_scratch(func, args)
        if func in FFT_OPS:
            return fft_scratch(func, args)
        if func in LOSS_OPS:
            return loss_scratch(func, args, self._reduction)
        if func in GROUP_NORM_OPS:
            return group_norm_scratch(func, args)
        own = fake_scratch(func, args, kwargs)
        if own:
            return own
        together: list[Scratch] = list(self._scratch(func, args, kwargs))
        return [together] if together else []

    def scratch_order(self, func: Any) -> Order:
        """How the kernel frees its scratch groups (:func:`memfit.trace._scratch.group_frees`):
        last first or not, and when what one group holds goes. Buffers held to the kernel's end:
        a sort's, an accumulating ``index_put``'s, ``masked_scatter_``'s, a mean reduce's
        counts, the embedding backward's; after the next group's own: a reduction's, a batched
        product's, ``renorm``'s; before it: the rest (H100 traces, torch 2.11)."""
        if func in EMBEDDING_BACKWARDS:  # what each step frees goes last first, as cub's
            return True, "end"
        if func in _HELD_TO_END:
            return False, "end"
        if func in _HELD_AFTER or func in REDUCE_OPS:
            return True, "after"
        return func in _LAST_FIRST or is_deform(func), "before"

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
        if func in _EFFICIENT_FORWARD:
            return efficient_forward_scratch(args)
        if func is aten._chunk_cat.default:
            return chunk_cat_metadata(args)
        if func is aten.max_pool2d_with_indices.default:
            return _pool_input_copy(args[0])
        if func is aten._scaled_dot_product_cudnn_attention_backward.default:
            # neither the sequence nor the head dim padded; H200 traces, torch 2.11: 20,500,736
            # = 128 x 8 x 77 x 64 x 4 + 128 x 8 x 77 x 4 + 256 for CLIP ViT-B/32's 77-token
            # text tower (b128); compiled GPT-2 b8 s1024: 25,559,296 per layer; H100 op sweep:
            # 1,984 = 4 x 4 x 3 x 8 x 4 + 4 x 4 x 3 x 4 + 256 for head dim 8
            q = args[1]
            return [_fused_backward_workspace(q, args[2])]
        if func in (aten._softmax.default, aten._log_softmax.default):
            # SoftMax.cu's host_softmax: ``input_.contiguous()`` once the output is allocated
            # (H100 traces, torch 2.11: Longformer's float32 [305, 512, 4, 513] attention
            # scores, 1,281,761,280 bytes after each layer's softmax output)
            x = args[0]
            if isinstance(x, torch.Tensor) and not x.is_contiguous():
                return [(x.numel() * x.element_size(), "softmax contiguous input copy")]
        if func is aten.abs.default and _complex(args[0]):
            # UnaryOps.cpp, unary_op_impl_with_complex_to_float: a complex input's absolute
            # value is computed complex to complex into a temporary, whose real part is then
            # copied into the float output made first (H100, torch 2.11: an STFT classifier's
            # spectrogram, a 263,694,336-byte complex64 temporary after its 131,847,168-byte
            # output, freed when abs ends)
            return [(args[0].numel() * args[0].element_size(), "complex abs temporary")]
        if func is aten._softmax_backward_data.default:
            # SoftMax.cu multiplies the gradient by the output into a temporary once the input
            # gradient is allocated (H200 traces, torch 2.11: one scores-sized tensor after every
            # attention's softmax backward, Qwen2.5-0.5B and TinyLlama-1.1B in float32)
            grad, output = args[0], args[1]
            size = grad.numel() * torch.promote_types(grad.dtype, output.dtype).itemsize
            return [(size, "softmax backward grad x output")]
        if func is aten.multinomial.default:
            return _multinomial_scratch(args, kwargs)
        if func is NONZERO_STATIC:
            size = args[1] if len(args) > 1 else kwargs["size"]
            return nonzero_static_scratch(args[0], int(size), self.sm_count)
        if func in _BERNOULLI_P:
            return _bernoulli_scratch(args[0], args[_BERNOULLI_P[func]])
        if func is aten.mode.default:
            return _mode_scratch(args, kwargs)
        if func is aten.unfold_backward.default and int(args[4]) < int(args[3]):
            # overlapping windows: UnfoldBackward.cpp indexes the input's dim with an int64
            # arange of it once the zeroed gradient is allocated (H100 traces, torch 2.11:
            # 320 bytes for a dim of 40)
            return [(8 * int(args[1][args[2]]), "unfold backward index of the dim")]
        if func in LINALG_OPS:
            return linalg_scratch(func, args)
        if func is aten.pow.Scalar:
            return _pow_scalar_scratch(args)
        if func is aten.native_layer_norm_backward.default:
            grad = args[0]  # made contiguous after the gradients are allocated
            if isinstance(grad, torch.Tensor) and not grad.is_contiguous():
                return [(grad.numel() * grad.element_size(), "layer norm contiguous grad copy")]
        if func in REDUCE_OPS:
            return reduce_op_scratch(func, args, kwargs, self.sm_count, self.threads_per_sm)
        if func in BMMS:
            return bmm_operand_copies(func, args)
        return ()

    def _int64_reduction(self, x: torch.Tensor) -> list[tuple[int, str]]:
        """An int64 ``max`` or ``min`` of all of ``x``: its partial results and semaphores."""
        return self._reduction(x, None, arg_size=8)

    def _reduction(
        self, x: torch.Tensor, dims: Any, arg_size: int | None = None
    ) -> list[tuple[int, str]]:
        """A CUDA reduction's partial results and semaphores (none for one within blocks);
        ``arg_size``: its accumulator's bytes (``reduction_scratch``'s default otherwise)."""
        scratch = reduction_scratch(x, dims, self.sm_count, self.threads_per_sm, arg_size)
        if scratch is None:
            return []
        return [(scratch[0], "reduction partial results"), (scratch[1], "reduction semaphores")]


def _pool_input_copy(x: Any) -> list[tuple[int, str]]:
    """CUDA's max pool reads its input contiguous in the layout its strides suggest
    (``input_.contiguous(suggest_memory_format())``), after it makes its outputs: a copy of
    a window cut out of a larger tensor (H100 zoo, torch 2.11: timm's Hiera pools its
    queries, a third of its ``qkv``, 1,610,612,736 bytes at batch 1024)."""
    from torch._prims_common import suggest_memory_format

    if not isinstance(x, torch.Tensor) or x.is_contiguous(memory_format=suggest_memory_format(x)):
        return []
    return [(x.numel() * x.element_size(), "max pool input made contiguous")]
