"""The cuDNN LSTM and GRU, as a real GPU runs ``nn.LSTM`` and ``nn.GRU``.

On CUDA, ``nn.LSTM`` is one cuDNN call (``_cudnn_rnn``), not the cell-by-cell loop the meta
device would run: it keeps a *reserve space* from forward to backward, takes a workspace during
each of its three calls (forward, input gradient, weight gradient), and writes the weight
gradients into one flat buffer. Its weights live in one flat buffer too, made when the module
reaches the GPU in fp32 or fp16 (``flatten_parameters``); in bf16 cuDNN copies them into a new
buffer on every forward and keeps it for the backward.

Its reserve space and workspace are :mod:`memfit.trace._rnn_sizes`'. A packed batch is the same
call over its tokens (:func:`cudnn_rnn`); an LSTM with projections (``proj_size``) the same call
with a projected output and hidden state. Plain RNNs keep the meta device's kernels (said in
the notes).

Under CUDA autocast, whatever its dtype, ``_cudnn_rnn`` goes through autocast's own wrapper
(``aten/src/ATen/cudnn/AutocastRNN.cpp``, ``_cudnn_rnn_cast_reflatten``): it runs cuDNN in
**float16** (``at::kHalf`` is hard-coded, bf16 autocast included), copies the weights into a new
fp16 flat buffer on every call (autograd-exposed: each weight's gradient comes back as a cast
of its slice of the fp16 weight gradient), then casts cx, hx and the input to fp16, in that
order (the call's arguments are evaluated right to left). The H200 trace of
``lstm-lm-bf16mixed-b32-s512`` shows exactly that (:func:`cudnn_lstm_autocast`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from memfit._gpus import DEFAULT_ARCHITECTURE
from memfit.trace._rnn_sizes import (
    LstmCall,
    proj_reserve_bytes,
    reserve_bytes,
    rnn_fits,
    workspace_bytes,
)

__all__ = [
    "OTHER_RNN_FUNCTIONS",
    "RnnHooks",
    "cudnn_rnn",
    "cudnn_rnn_autocast",
    "flatten_like_cuda",
    "note_cell_kernels",
    "rnn_kind",
]

LSTM_FUNCTION = torch._C._VariableFunctions.lstm
GRU_FUNCTION = torch._C._VariableFunctions.gru
OTHER_RNN_FUNCTIONS = {  # what runs the meta device's cell kernels, and is said
    torch._C._VariableFunctions.rnn_tanh: "RNN (tanh)",
    torch._C._VariableFunctions.rnn_relu: "RNN (ReLU)",
}
_ELEMENT = {torch.float32: ("fp32", 4), torch.bfloat16: ("bf16", 2), torch.float16: ("fp16", 2)}
_FLATTENED = (torch.float32, torch.float16)  # cuDNN-acceptable dtypes flatten_parameters takes


@dataclass
class RnnHooks:
    """How the LSTM emulation reaches the recorder: workspaces and names for its tensors, and
    the target architecture's measured cuDNN table (:attr:`Architecture.cudnn_table`)."""

    alloc: Callable[[int, str], int]  # a workspace of n bytes; returns its block
    free: Callable[[int], None]
    name: Callable[[torch.Tensor, str], None]
    notes: set[str]
    table: str = DEFAULT_ARCHITECTURE.cudnn_table
    dropout_state: bool = False  # cuDNN's dropout state is made (once: the process keeps it)

    def workspace(self, nbytes: int, label: str) -> None:
        self.free(self.alloc(nbytes, label))


@dataclass(frozen=True)
class _Spec:
    name: str  # "LSTM" or "GRU"
    dirs: int
    batch_first: bool
    train: bool
    workspace: int
    reserve: int
    flattened: bool
    hooks: RnnHooks


def _one_buffer(params: Sequence[torch.Tensor]) -> bool:
    """Whether the weights are views of one flat buffer, in order (cuDNN uses it as is)."""
    first = params[0].untyped_storage()
    offset = params[0].storage_offset()
    for p in params:
        if p.untyped_storage()._cdata != first._cdata or p.storage_offset() != offset:
            return False
        if not p.is_contiguous():
            return False
        offset += p.numel()
    return True


class _CudnnRNN(torch.autograd.Function):
    """One ``_cudnn_rnn`` call, an LSTM's (``c0`` its cell state) or a GRU's (``c0`` None)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, spec: _Spec, x: torch.Tensor, h0: torch.Tensor, c0: Any, *params: Any
    ) -> tuple[torch.Tensor, ...]:
        seq_first = x.transpose(0, 1) if spec.batch_first else x
        contiguous = seq_first.contiguous()
        out = contiguous.new_empty((*contiguous.shape[:-1], h0.shape[-1] * spec.dirs))
        states = [torch.empty_like(h0)] + ([] if c0 is None else [torch.empty_like(c0)])
        weights = None
        if not spec.flattened:
            weights = x.new_empty((sum(p.numel() for p in params),))
            spec.hooks.name(weights, f"cuDNN {spec.name} weight buffer")
        workspace = spec.hooks.alloc(spec.workspace, f"cuDNN {spec.name} workspace")
        reserve = None
        if spec.train:
            reserve = x.new_empty((spec.reserve,), dtype=torch.uint8)
            spec.hooks.name(reserve, f"cuDNN {spec.name} reserve space")
        spec.hooks.free(workspace)
        del contiguous
        ctx.spec = spec
        ctx.cell = c0 is not None
        result = out.transpose(0, 1) if spec.batch_first else out
        # cuDNN's backward reads the output too: it stays alive until then
        ctx.save_for_backward(x, h0, c0, reserve, weights, result, *params)
        return (result, *states)

    @staticmethod
    def backward(ctx: Any, d_out: torch.Tensor, *_: Any) -> tuple[Any, ...]:  # type: ignore[override]
        spec: _Spec = ctx.spec
        x, h0, c0, _, _, _, *params = ctx.saved_tensors
        order = (lambda t: t.transpose(0, 1)) if spec.batch_first else (lambda t: t)
        x_c = order(x).contiguous()
        dy = order(d_out).contiguous()
        dx = torch.empty_like(x_c)
        dhx = torch.empty_like(h0)
        dcx = torch.empty_like(c0) if ctx.cell else None
        spec.hooks.workspace(spec.workspace, f"cuDNN {spec.name} backward workspace")
        del dy, x_c
        x_c = order(x).contiguous()
        dw = x.new_zeros((sum(p.numel() for p in params),))
        spec.hooks.workspace(spec.workspace, f"cuDNN {spec.name} weight gradient workspace")
        del x_c
        grads, offset = [], 0
        for p in params:
            grads.append(dw[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        return (None, order(dx), dhx, dcx, *grads)


def rnn_kind(func: Any) -> str | None:
    """The kind of cuDNN RNN call :func:`cudnn_rnn` models that ``func`` is, if any (by
    identity: it is asked of every function a trace sees)."""
    if func is LSTM_FUNCTION:
        return "lstm"
    return "gru" if func is GRU_FUNCTION else None


@dataclass(frozen=True)
class _Call:
    """One ``torch._VF.lstm``/``gru`` call's arguments, padded or packed alike: the input
    (3-d padded, 2-d a packed batch's data), the packed batch's sizes per step (None: padded),
    the initial states (``c0`` None for a GRU) and the flat weights."""

    x: torch.Tensor
    batch_sizes: torch.Tensor | None
    h0: torch.Tensor
    c0: torch.Tensor | None
    params: Sequence[torch.Tensor]
    has_biases: bool
    layers: int
    dropout: float
    train: bool
    bidir: bool
    batch_first: bool


def _parts(args: tuple[Any, ...], kind: str) -> _Call | None:
    """A call's parts: padded ``(input, hx, params, has_biases, layers, dropout, train,
    bidirectional, batch_first)`` or packed ``(data, batch_sizes, hx, params, has_biases,
    layers, dropout, train, bidirectional)``; hx an LSTM's ``(h0, c0)``, a GRU's tensor.
    None for a form not modelled."""
    if len(args) != 9:
        return None
    packed = isinstance(args[1], torch.Tensor) and args[1].dim() == 1
    if packed:
        x, batch_sizes, state, params, has_biases, layers, dropout, train, bidir = args
        batch_first = False
    else:
        x, state, params, has_biases, layers, dropout, train, bidir, batch_first = args
        batch_sizes = None
    if kind == "lstm":
        if not (isinstance(state, (list, tuple)) and len(state) == 2):
            return None
        h0, c0 = state
    else:
        if not isinstance(state, torch.Tensor):
            return None
        h0, c0 = state, None
    if not isinstance(h0, torch.Tensor) or h0.dim() != 3:
        return None
    return _Call(
        x,
        batch_sizes,
        h0,
        c0,
        params,
        bool(has_biases),
        int(layers),
        float(dropout),
        bool(train),
        bool(bidir),
        bool(batch_first),
    )


def cudnn_rnn(args: tuple[Any, ...], hooks: RnnHooks, kind: str) -> Any:
    """``torch._VF.lstm`` (``kind="lstm"``) or ``torch._VF.gru`` (``"gru"``) as cuDNN runs it,
    padded or packed, or None where cuDNN's path is not modelled (said in the notes).

    A packed batch (H200, torch 2.11, cuDNN 9.19: 170 training calls of LSTMs and GRUs, 1-2
    layers, both directions, hidden sizes 256-1024, fp32 and fp16) keeps the reserve space of
    the padded call with the tokens (the lengths' sum) in place of B*S, exact on every probe;
    its output is (tokens, directions * H). Its workspace is the padded fit with the tokens in
    place of B*S: above every probe (by 3% to 4x), a bound."""
    call = _parts(args, kind)
    if call is None:
        hooks.notes.add(
            f"an {kind.upper()} ran PyTorch's cell kernels (its cuDNN path is not modelled)"
        )
        return None
    return _run(call, hooks, kind)


def _run(call: _Call, hooks: RnnHooks, kind: str) -> Any:
    """:func:`cudnn_rnn` of a call's parts."""
    name = kind.upper()
    x, h0, c0, params = call.x, call.h0, call.c0, call.params
    known = _ELEMENT.get(x.dtype)
    packed = call.batch_sizes is not None
    if (
        known is None
        or x.dim() != (2 if packed else 3)
        or not call.has_biases
        or any(p.dtype != x.dtype for p in params)
    ):
        hooks.notes.add(f"an {name} ran PyTorch's cell kernels (its cuDNN path is not modelled)")
        return None
    dtype, e = known
    dirs = 2 if call.bidir else 1
    if call.batch_sizes is not None:  # packed
        sizes = [int(n) for n in call.batch_sizes.tolist()]
        b, s, tokens = sizes[0], len(sizes), int(x.shape[0])
    else:
        b, s = (x.shape[0], x.shape[1]) if call.batch_first else (x.shape[1], x.shape[0])
        tokens = 0
    h = int(h0.shape[-1] if c0 is None else c0.shape[-1])
    proj = int(h0.shape[-1]) if h0.shape[-1] != h else 0  # an LSTM's proj_size
    grad = torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params))
    training = call.train and grad
    infer = not training
    if infer and not any(k.endswith("|infer") for k in rnn_fits(hooks.table, kind)):
        hooks.notes.add(f"cuDNN {name} inference workspace taken from training's (not probed)")
        infer = False
    size = LstmCall(
        dtype, e, call.layers, dirs, int(b), int(s), h, infer, int(x.shape[-1]), kind, tokens, proj
    )
    workspace, unprobed = workspace_bytes(size, hooks.table)
    for what in unprobed:
        hooks.notes.add(f"cuDNN {name} workspace: {what}")
    reserve = _reserve(size, hooks) if training else 0  # inference keeps none
    if training and call.dropout > 0 and call.layers > 1:
        reserve += _dropout_masks(call.layers, dirs, int(b), int(s), h, hooks)
    spec = _Spec(
        name=name,
        dirs=dirs,
        batch_first=call.batch_first,
        train=training,
        workspace=workspace,
        reserve=reserve,
        flattened=_one_buffer(params),
        hooks=hooks,
    )
    return _CudnnRNN.apply(spec, x, h0, c0, *params)


def _reserve(call: LstmCall, hooks: RnnHooks) -> int:
    """The call's reserve space in training; an LSTM with projections' from its form, linear in
    the projection (exact at the two shares probed; another share said), a packed batch with
    projections taken as padded (said)."""
    if not call.proj:
        return reserve_bytes(
            call.layers, call.dirs, call.steps, 1, call.hidden, call.element, call.kind
        )
    if call.proj * 8 not in (4 * call.hidden, 3 * call.hidden):
        hooks.notes.add(
            f"cuDNN LSTM reserve space: a projection of {call.proj} of {call.hidden} units "
            "taken from its form linear in the projection, exact at 3/8 and 1/2 of the hidden "
            "size"
        )
    if call.tokens:
        hooks.notes.add("cuDNN LSTM reserve space: a packed batch with projections taken as padded")
    steps = call.batch * call.seq
    return proj_reserve_bytes(call.layers, call.dirs, steps, call.hidden, call.proj, call.element)


# cuDNN's dropout state (its random generators' states), made by the first RNN call with
# dropout in training and kept for the process: 6,488,064 bytes on an H200 (torch 2.11, cuDNN
# 9.19; the size grows with the GPU's multiprocessors, and the H100's are as many)
DROPOUT_STATE = 6_488_064


def _dropout_masks(layers: int, dirs: int, b: int, s: int, h: int, hooks: RnnHooks) -> int:
    """What dropout between the layers adds to the reserve space: a bit per element of each
    later layer's input (``dirs * H`` wide, per direction) over B*S steps, packed batches too
    (the longest sequence times the batch); exact on 64 H200 probes of 2-layer LSTMs and GRUs.
    The first such call makes cuDNN's dropout state, kept from then on (:data:`DROPOUT_STATE`);
    more than 2 layers: the masks extrapolated, and said."""
    if not hooks.dropout_state:
        hooks.dropout_state = True
        hooks.alloc(DROPOUT_STATE, "cuDNN dropout state")
    if layers > 2:
        hooks.notes.add(f"cuDNN's dropout masks of {layers} layers extrapolated from 2 layers'")
    return (layers - 1) * dirs * dirs * h * b * s // 8


class _HalfFlatWeights(torch.autograd.Function):
    """``copy_weights_to_flat_buf_views`` under autocast: one new fp16 buffer holding every
    weight. Backward: each weight's gradient is its slice of the buffer's gradient cast back to
    the weight's dtype, made last weight first (the order the engine runs the copies' backward
    in on the GPU: 16 KiB, 16 KiB, 16 MiB, 16 MiB per layer, from the last layer)."""

    @staticmethod
    def forward(ctx: Any, hooks: RnnHooks, name: str, *params: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.shapes = [(p.shape, p.dtype, p.numel()) for p in params]
        buf: torch.Tensor = params[0].new_empty(
            (sum(p.numel() for p in params),), dtype=torch.float16
        )
        hooks.name(buf, f"cuDNN {name} fp16 weight buffer (autocast)")
        return buf

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        offsets, offset = [], 0
        for _, _, n in ctx.shapes:
            offsets.append(offset)
            offset += n
        grads: list[Any] = [None] * len(ctx.shapes)
        for i in reversed(range(len(ctx.shapes))):
            shape, dtype, n = ctx.shapes[i]
            grads[i] = grad[offsets[i] : offsets[i] + n].view(shape).to(dtype)
        return (None, None, *grads)


def cudnn_rnn_autocast(args: tuple[Any, ...], hooks: RnnHooks, kind: str) -> Any:
    """``torch._VF.lstm`` or ``gru`` under CUDA autocast, as ``_cudnn_rnn_cast_reflatten``
    runs it: in fp16, on a fresh fp16 copy of the weights (see the module docstring); None
    where cuDNN's path is not modelled."""
    call = _parts(args, kind)
    if call is None:
        return cudnn_rnn(args, hooks, kind)  # says why it is not modelled
    params = call.params
    floats = (torch.float32, torch.bfloat16, torch.float16)
    if call.x.dtype not in floats or any(p.dtype not in floats for p in params):
        return cudnn_rnn(args, hooks, kind)
    half = torch.float16
    if params and params[0].dtype != half:  # needs_cast_and_flatten
        params = [_HalfFlatWeights.apply(hooks, kind.upper(), *params)]
    cx = None if call.c0 is None else call.c0.to(half)  # right to left: cx, hx, the input
    hx = call.h0.to(half)
    half_call = dataclasses.replace(call, x=call.x.to(half), h0=hx, c0=cx, params=params)
    return _run(half_call, hooks, kind)


def note_cell_kernels(func: Any, hooks: RnnHooks) -> None:
    """Say that a plain RNN ran the meta device's cell kernels. On CUDA it is one cuDNN call
    whose reserve space, kept from forward to backward, and workspace are not modelled: they
    can exceed the cell kernels' saved activations by far (an LSTM's or a GRU's reserve space
    is ``(6 or 7 * layers - 1) * directions`` elements per token and hidden unit)."""
    hooks.notes.add(
        f"a {OTHER_RNN_FUNCTIONS[func]} ran PyTorch's cell kernels: cuDNN's reserve space and "
        "workspace for it are not modelled, and the GPU can take more"
    )


def _flatten(module: nn.RNNBase) -> None:
    """What ``_cudnn_rnn_flatten_weight`` does on a GPU: one buffer, the weights views of it."""
    weights = [w for w in module._flat_weights if isinstance(w, torch.Tensor)]
    if len(weights) != len(module._flat_weights) or not weights:
        return
    dtype = weights[0].dtype
    if dtype not in _FLATTENED or any(w.dtype != dtype or w.device.type != "meta" for w in weights):
        return
    if module.mode not in ("LSTM", "GRU") or _one_buffer(weights):
        return
    flat = torch.empty(sum(w.numel() for w in weights), dtype=dtype, device="meta")
    offset = 0
    with torch.no_grad():
        for w in weights:
            w.data = flat[offset : offset + w.numel()].view_as(w)
            offset += w.numel()


@contextmanager
def flatten_like_cuda() -> Iterator[None]:
    """Make ``nn.LSTM`` flatten its weights on the meta device as it would on the GPU."""
    original = nn.RNNBase.flatten_parameters

    def flatten_parameters(self: nn.RNNBase) -> None:
        _flatten(self)

    nn.RNNBase.flatten_parameters = flatten_parameters  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.RNNBase.flatten_parameters = original  # type: ignore[method-assign]
