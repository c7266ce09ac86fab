"""memfit's own fake kernels: ops that have no meta kernel, or whose meta kernel refuses.

A trace runs every op on meta tensors, which needs a kernel that gives the op's outputs from
its inputs' shapes. A few ops that models reach have none, and the trace would stop there. For
each such op this module holds, in one place:

* its outputs as the CUDA kernel makes them (shape, dtype, layout), given the values memfit
  knows (``FakeContext.value``: the shadows of small tensors that came from the batch); where a
  size depends on values memfit does not know, it is bounded from above and the estimate says
  so (``FakeContext.note``);
* what the CUDA kernel allocates through the caching allocator beyond its outputs: temporaries
  made before the outputs and freed when the kernel returns (:func:`temporaries`), and scratch
  after them (:func:`scratch`). ``_kernels.KernelModel`` asks for both, as it does for the
  kernels that have a meta kernel, so that a batch model can ask again at another batch.

What autograd saves for backward needs nothing here: autograd runs above the trace's dispatch
mode and keeps the fake outputs it saves alive, as it keeps real ones.

The ops:

``aten::_ctc_loss.Tensor``, ``aten::_ctc_loss_backward`` (both overloads)
    PyTorch's own CUDA CTC loss (ATen's cuda/LossCTC.cu), which ``F.ctc_loss`` and transformers'
    ``*ForCTC`` heads reach (``_ctc_loss`` with integer lengths has a meta kernel; only its
    temporaries are added). The forward copies the lengths and the targets' offsets to the GPU
    (8 bytes an element each), then allocates ``log_alpha`` ``(batch, T, 2 * longest target +
    1)`` and the per-sample loss ``(batch,)``, which autograd keeps for backward. The backward
    copies the lengths again, allocates ``log_beta`` (``log_alpha``'s size) and the gradient
    (``log_probs``' size, contiguous) and, for a large problem (``2*T + 2.4*batch + 0.2*classes
    > 450``), sums alpha and beta at the blanks and takes their ``logsumexp`` (two tensors of
    ``(batch, T, longest + 1)`` and two of ``(batch, T)`` at once); with ``zero_infinity`` it
    then replaces the gradient by a ``where`` (a second gradient-sized tensor). cuDNN's CTC loss
    (``_cudnn_ctc_loss``) is not modelled: see :func:`cudnn_ctc_note`.
``aten::multi_margin_loss_backward``, ``aten::multilabel_margin_loss_backward``
    The input's gradient, as the CUDA kernels make it.
``torchvision::nms``
    Its meta kernel refuses meta tensors: how many boxes it keeps depends on their values. With
    known values (boxes and scores that came from the batch) the real ``nms`` answers on the
    CPU; otherwise all boxes are taken as kept, an upper bound, and the estimate says so. The
    CUDA kernel (torchvision 0.26-0.29) sorts the scores (values and order, and the sort's own
    storage), gathers the boxes in that order, allocates an IoU bit mask of ``boxes x
    ceil(boxes / 64)`` int64 words and a keep mask of one byte a box, then selects the kept
    indices (``masked_select``, through ``nonzero``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from memfit.trace._bnb_int8 import INT8_FAKES, int8_scratch, int8_temporaries
from memfit.trace._fake_args import arg, meta
from memfit.trace._scratch import Scratch, sort_scratch

__all__ = ["FakeContext", "cudnn_ctc_note", "fake_kernel", "op_name", "scratch", "temporaries"]

_NAMES: dict[Any, str] = {}


def op_name(func: Any) -> str:
    """``namespace::name.overload`` of an op (``.default`` for the default overload), or ""."""
    name = _NAMES.get(func)
    if name is None:
        schema = getattr(func, "_schema", None)
        name = f"{schema.name}.{schema.overload_name or 'default'}" if schema is not None else ""
        _NAMES[func] = name
    return name


@dataclass(frozen=True)
class FakeContext:
    """What a fake kernel may ask of the trace: a meta tensor's known value, the module that
    is running, and a note for the estimate (an assumption it made about unknown values)."""

    value: Callable[[torch.Tensor], torch.Tensor | None]
    module: Callable[[], str]
    note: Callable[[str], None]


Fake = Callable[[tuple[Any, ...], dict[str, Any], FakeContext], Any]


# -- CTC loss -------------------------------------------------------------------------------


def _check_ctc_dtype(log_probs: torch.Tensor, what: str) -> None:
    """CUDA's CTC loss is compiled for float32 and float64 only (AT_DISPATCH_FLOATING_TYPES)."""
    if log_probs.dtype not in (torch.float32, torch.float64):
        name = str(log_probs.dtype).removeprefix("torch.")
        words = {"float16": "Half", "bfloat16": "BFloat16"}.get(name, name)
        raise RuntimeError(f"\"{what}\" not implemented for '{words}'")


def _longest_target(targets: torch.Tensor, target_lengths: torch.Tensor, ctx: FakeContext) -> int:
    """The longest target: from the lengths' values where known, else as long as the targets
    tensor allows (its width; all of it for concatenated targets), with a note."""
    known = ctx.value(target_lengths)
    if known is not None:
        return int(known.max()) if known.numel() else 0
    bound = int(targets.shape[-1]) if targets.dim() > 0 else 0
    where = ctx.module() or "the model"
    ctx.note(
        f"ctc_loss target lengths in {where} have no known value; answered the longest the "
        f"targets allow ({bound}), an upper bound on the loss's log_alpha and log_beta"
    )
    return bound


def _ctc_loss(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: FakeContext) -> Any:
    """``_ctc_loss.Tensor``: (per-sample loss, log_alpha), as ``ctc_loss_gpu_template``."""
    log_probs, targets, target_lengths = args[0], args[1], args[3]
    _check_ctc_dtype(log_probs, "ctc_loss_cuda")
    steps, batch = int(log_probs.shape[0]), int(log_probs.shape[1])
    longest = _longest_target(targets, target_lengths, ctx)
    return meta((batch,), log_probs.dtype), meta((batch, steps, 2 * longest + 1), log_probs.dtype)


def _ctc_loss_backward(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: FakeContext) -> Any:
    """``_ctc_loss_backward``: the gradient of ``log_probs``, contiguous (``full_like``)."""
    log_probs = args[1]
    _check_ctc_dtype(log_probs, "ctc_loss_backward_cuda")
    return meta(tuple(log_probs.shape), log_probs.dtype)


def _lengths_on_gpu(log_probs: torch.Tensor) -> list[tuple[int, str]]:
    batch = int(log_probs.shape[1]) if log_probs.dim() == 3 else 1
    return [
        (8 * batch, "CTC loss target lengths"),
        (8 * batch, "CTC loss input lengths"),
        (8 * batch, "CTC loss target offsets"),
    ]


def _ctc_backward_scratch(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Scratch]]:
    """The large problem's blank terms (``is_large`` in ctc_loss_backward_gpu_template): alpha
    + beta at the blanks, then ``logsumexp`` over them (its maxima, the differences and the
    result live with the sum); with ``zero_infinity``, the ``where`` that replaces the
    gradient."""
    log_probs, log_alpha = args[1], args[6]
    zero_infinity = bool(arg(args, kwargs, 8, "zero_infinity", False))
    steps, batch, classes = (int(n) for n in log_probs.shape)
    if 2 * steps + (24 * batch) // 10 + (2 * classes) // 10 <= 450:
        return []  # one kernel collects the gradient: nothing allocated
    size = log_alpha.element_size()
    rows = batch * steps
    blanks = rows * (int(log_alpha.shape[2]) // 2 + 1) * size
    groups: list[list[Scratch]] = [
        [
            (blanks, "CTC loss backward alpha + beta at the blanks"),
            (rows * size, "CTC loss backward logsumexp maxima"),
            (blanks, "CTC loss backward logsumexp differences"),
            (rows * size, "CTC loss backward logsumexp result"),
        ]
    ]
    if zero_infinity:
        groups.append(
            [
                (batch, "CTC loss backward infinite-loss mask"),
                (size, "CTC loss backward zero"),
                (log_probs.numel() * size, "CTC loss backward gradient with infinities zeroed"),
            ]
        )
    return groups


def cudnn_ctc_note(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: FakeContext) -> str | None:
    """A note where a GPU may run cuDNN's CTC loss instead of PyTorch's (``torch.ctc_loss``'s
    arguments, before it converts the targets to int64): cuDNN enabled, blank 0, float32
    ``log_probs``, 1-d contiguous int32 targets (on the host, for lengths given as lists; and
    int32 lengths, for lengths given as tensors), every input length ``T`` and every target
    shorter than 256 and no longer than its input (``_use_cudnn_ctc_loss``). cuDNN keeps a
    gradient of ``log_probs``' size for backward instead of ``log_alpha``, and a workspace whose
    size only cuDNN knows; memfit estimates PyTorch's own kernel and says so."""
    log_probs, targets, inputs, lengths = (
        arg(args, kwargs, i, name, None)
        for i, name in enumerate(("log_probs", "targets", "input_lengths", "target_lengths"))
    )
    blank = arg(args, kwargs, 4, "blank", 0)
    if not (isinstance(log_probs, torch.Tensor) and isinstance(targets, torch.Tensor)):
        return None
    if not torch.backends.cudnn.enabled or blank != 0 or log_probs.dim() != 3:
        return None
    if log_probs.dtype != torch.float32 or targets.dtype != torch.int32 or targets.dim() != 1:
        return None
    if not targets.is_contiguous():
        return None
    if isinstance(inputs, torch.Tensor) and isinstance(lengths, torch.Tensor):
        if inputs.dtype != torch.int32 or lengths.dtype != torch.int32:
            return None
        inputs, lengths = ctx.value(inputs), ctx.value(lengths)
    elif targets.device.type != "cpu":
        return None
    if inputs is not None and lengths is not None:
        steps = int(log_probs.shape[0])
        ins, outs = [int(n) for n in inputs], [int(n) for n in lengths]
        if any(n != steps for n in ins) or any(
            t >= 256 or t > n for t, n in zip(outs, ins, strict=False)
        ):
            return None
    where = ctx.module() or "the model"
    return (
        f"ctc_loss in {where} has arguments for which a GPU may run cuDNN's CTC loss (int32 "
        "targets, blank 0, float32 log_probs); memfit estimated PyTorch's own CUDA kernel, "
        "which keeps log_alpha for backward where cuDNN keeps a gradient of log_probs' size "
        "and a workspace (torch.backends.cudnn.flags(enabled=False) around the loss makes the "
        "GPU run what was estimated)"
    )


# -- torchvision's nms ----------------------------------------------------------------------


def _nms(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: FakeContext) -> Any:
    """The kept boxes' indices: exact where the boxes and scores have values, else all kept.
    bf16 boxes are refused as CUDA refuses them (its kernel takes float, double and half)."""
    boxes, scores = args[0], args[1]
    if boxes.dtype not in (torch.float32, torch.float64, torch.float16):
        name = str(boxes.dtype).removeprefix("torch.")
        words = {"bfloat16": "BFloat16"}.get(name, name)
        raise NotImplementedError(f"\"nms_kernel\" not implemented for '{words}'")
    real_boxes, real_scores = ctx.value(boxes), ctx.value(scores)
    if real_boxes is not None and real_scores is not None:
        threshold = float(arg(args, kwargs, 2, "iou_threshold", 0.5))
        kept = torch.ops.torchvision.nms.default(real_boxes, real_scores, threshold)
        return meta((int(kept.numel()),), torch.long)
    where = ctx.module() or "the model"
    ctx.note(
        f"torchvision::nms in {where} keeps as many boxes as real data decides; answered all "
        "of them kept (an upper bound on its output and on what is computed from it)"
    )
    return meta((int(boxes.shape[0]),), torch.long)


def _nms_temporaries(args: tuple[Any, ...]) -> list[tuple[int, str]]:
    boxes, scores = args[0], args[1]
    n = int(boxes.shape[0])
    if n == 0:
        return []
    words = (n + 63) // 64
    sort = [item[0] for group in sort_scratch((scores, 0), {}) for item in group]
    return [
        (n * scores.element_size(), "nms sorted scores"),
        (8 * n, "nms score order"),
        *[(nbytes, "nms sort storage") for nbytes in sort],
        (n * 4 * boxes.element_size(), "nms boxes in score order"),
        (8 * n * words, "nms IoU bit mask"),
        (n, "nms keep mask"),
        (8 * n, "nms kept positions (nonzero)"),
    ]


# -- the registry ---------------------------------------------------------------------------

# -- margin losses' backward ----------------------------------------------------------------


def _margin_loss_backward(args: tuple[Any, ...], kwargs: dict[str, Any], ctx: FakeContext) -> Any:
    """``multi_margin_loss_backward`` and ``multilabel_margin_loss_backward`` (no meta kernel):
    the input's gradient, contiguous, as the CUDA kernels allocate it and nothing more (H100 op
    sweep: 3,276,800 bytes for a 1,280 x 640 float32 input)."""
    x = args[1]
    return meta(tuple(int(n) for n in x.shape), x.dtype)


_FAKES: dict[str, Fake] = {
    "aten::multi_margin_loss_backward.default": _margin_loss_backward,
    "aten::multilabel_margin_loss_backward.default": _margin_loss_backward,
    "aten::_ctc_loss.Tensor": _ctc_loss,
    "aten::_ctc_loss_backward.default": _ctc_loss_backward,
    "aten::_ctc_loss_backward.Tensor": _ctc_loss_backward,
    "torchvision::nms.default": _nms,
    **INT8_FAKES,  # bitsandbytes' LLM.int8 (``_bnb_int8``)
}
_CTC = ("aten::_ctc_loss.default", "aten::_ctc_loss.Tensor")
_CTC_BACKWARD = ("aten::_ctc_loss_backward.default", "aten::_ctc_loss_backward.Tensor")


def fake_kernel(func: Any) -> Fake | None:
    """memfit's own kernel for ``func``, or None where the op's meta kernel serves."""
    return _FAKES.get(op_name(func))


def temporaries(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> list[tuple[int, str]]:
    """What ``func``'s CUDA kernel allocates before its outputs and frees when it returns."""
    name = op_name(func)
    if name in INT8_FAKES:
        return int8_temporaries(name, args, kwargs or {})
    if name in _CTC:
        return _lengths_on_gpu(args[0])
    if name in _CTC_BACKWARD:
        log_alpha = args[6]
        beta = log_alpha.numel() * log_alpha.element_size()
        return [*_lengths_on_gpu(args[1]), (beta, "CTC loss backward log_beta")]
    if name == "torchvision::nms.default":
        return _nms_temporaries(args)
    return []


def scratch(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[list[Scratch]]:
    """What ``func``'s CUDA kernel allocates after its outputs, in groups that live together."""
    name = op_name(func)
    if name in _CTC_BACKWARD:
        return _ctc_backward_scratch(args, kwargs)
    if name in INT8_FAKES:
        return int8_scratch(name, args, kwargs)
    return []
