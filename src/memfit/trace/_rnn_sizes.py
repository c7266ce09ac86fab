"""The sizes of cuDNN's LSTM and GRU calls (``memfit.trace._rnn``): the reserve space kept from
forward to backward, and the workspace each call takes.

Sizes, measured on an H200 and an H100 with torch 2.11 / cuDNN 9.19 in fp32, bf16 and fp16,
1-4 layers, one and two directions, hidden sizes 32 to 1024, batches 16 to 32,768, training and
inference (``benchmarks/cudnn_probe.py``): the reserve space is
``(6*layers - 1) * directions * B*S*H * element_size + 256`` bytes on all of them. The workspace
over the element size is, at each hidden size, exactly ``a_H*B*S + b_H*B + g_H``, and cuDNN's
engine shows in ``a_H / H``: fp32 and fp16 take 22 (one direction) or 31 (two) up to a hidden
size of 192 and 6 or 15 from 256; bf16 takes 6 or 15 throughout. Each such regime is fitted in
closed form over its hidden sizes (``benchmarks/build_cudnn_table.py``), exact to the byte on
every probe. Between two regimes the larger is taken; outside the probed hidden sizes or layer
counts the estimate extrapolates and says so. An input size other than the hidden size adds a
term of its own (:func:`_input_term`: exact in inference, bounded from above in training).
The probes' sequences are 16 to 256 long; beyond them the fit can be high: the H200 took
221,118,976 bytes for lstm-lm-bf16mixed-b32-s512 (fp16 under autocast, 2 layers, H 1024, B 32,
S 512) where the fit gives 252,969,472.
A GRU is the same call with three gates and no cell state. An H100 (torch 2.11, cuDNN 9.19;
hidden sizes 256 and 1024, inputs once and twice the hidden size, 1-2 layers, both directions,
fp32, bf16 and fp16) kept a reserve space of ``(7*layers - 1) * directions * B*S*H`` elements
and 256 bytes, and took a workspace of the same closed form per engine (its own fits); an
input size other than the hidden size adds ``e*(I-H)*(B*S + 3*H*dirs)`` in inference, and is
bounded by the LSTM's term in training. Hidden sizes outside 256-1024 are extrapolated and
said. A packed batch is the same call over its tokens.

An LSTM with projections (``proj_size`` P): an H200 (torch 2.11, cuDNN 9.19; hidden sizes 512
and 1024 with P half of it, 1 and 3 layers, both directions, batches 16 and 64 of 64 steps, fp32
and fp16, training and inference) and an H100 (the same with hidden sizes 512, 800 and 1024, P
3/8 of it, 64 and 256 steps) kept a reserve space of ``((7*layers - 1)*H + layers*P) *
directions * B*S`` elements and 256 bytes on all 128 training probes
(:func:`proj_reserve_bytes`). The workspace, the same in training and inference, is at 64
steps and P = H/2 exactly ``(u1*H + u0)*B + v2*H^2 + v1*H`` elements per (dtype, layers,
directions) (:func:`proj_workspace`); at other lengths and shares it is bounded (said in the
notes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from memfit._gpus import DEFAULT_ARCHITECTURE
from memfit.trace._cudnn import cudnn_data

__all__ = ["LstmCall", "proj_reserve_bytes", "reserve_bytes", "rnn_fits", "workspace_bytes"]


def rnn_fits(
    table: str = DEFAULT_ARCHITECTURE.cudnn_table, kind: str = "lstm"
) -> dict[str, list[dict[str, Any]]]:
    fits: dict[str, list[dict[str, Any]]] = cudnn_data(table)[f"{kind}_workspace"]
    return fits


@dataclass(frozen=True)
class LstmCall:
    """What cuDNN's LSTM workspace depends on: dtype name and element size, layers,
    directions, batch, sequence, hidden size, inference or training, the input size, and an
    LSTM's projection size."""

    dtype: str
    element: int
    layers: int
    dirs: int
    batch: int
    seq: int
    hidden: int
    infer: bool
    input: int = 0  # 0: the hidden size
    kind: str = "lstm"  # or "gru"
    tokens: int = 0  # a packed batch's: its lengths' sum (0: batch * seq, padded)
    proj: int = 0  # an LSTM's proj_size (0: no projections)

    @property
    def input_size(self) -> int:
        return self.input or self.hidden

    @property
    def steps(self) -> int:
        """The time steps the call runs over all sequences: B*S padded, the tokens packed."""
        return self.tokens or self.batch * self.seq


def _regime_value(regime: dict[str, Any], b: int, s: int, h: int, steps: int = 0) -> float:
    """One engine's closed form (``build_cudnn_table.lstm_workspace_fits``), over the element
    size; ``steps`` in place of B*S for a packed batch."""
    b1, b0 = regime["b"]
    c1, c0 = regime["c"]
    g2, g1, g0 = regime["g"]
    per_batch = regime["a"] * h * (steps or b * s) + (b1 * h + b0) * b + (c1 * h + c0) * s
    return float(per_batch + g2 * h * h + g1 * h + g0)


def _at_hidden(
    regimes: list[dict[str, Any]], b: int, s: int, h: int, steps: int = 0
) -> tuple[float, str]:
    """The workspace (over the element size) at hidden size ``h``: the regime probed around
    it; between two regimes, the larger of both (where cuDNN changes engine is not known);
    outside every probed size, the nearest regime's, and a note."""
    inside = [r for r in regimes if r["h"][0] <= h <= r["h"][1]]
    if inside:
        return _regime_value(inside[0], b, s, h, steps), ""
    below = [r for r in regimes if r["h"][1] < h]
    above = [r for r in regimes if r["h"][0] > h]
    if below and above:
        return max(
            _regime_value(below[-1], b, s, h, steps), _regime_value(above[0], b, s, h, steps)
        ), ""
    nearest = below[-1] if below else above[0]
    return _regime_value(nearest, b, s, h, steps), f"hidden size {h} outside the probed ones"


def _input_term(call: LstmCall) -> int:
    """What an input size I other than the hidden size H adds (H100 probes, torch 2.11, I of
    0.5, 2 and 4 times H; a GRU's of 2 times H): in inference exactly
    ``e*(I-H)*(B*S + G*H*dirs)``, G the gates (an LSTM's 4, a GRU's 3); in training at most
    ``e*(I-H)*(3*dirs*B*S + 2*B + 4*H*dirs)`` for I > H (the LSTM probes' steepest growth,
    which bounds the GRU's too), and nothing for I < H, where the workspace at I = H bounds it
    (it grows with I)."""
    i, h, e, dirs = call.input_size, call.hidden, call.element, call.dirs
    bs, b = call.steps, call.batch
    if call.infer:
        gates = 3 if call.kind == "gru" else 4
        return e * (i - h) * (bs + gates * h * dirs)
    if i <= h:
        return 0
    return e * (i - h) * (3 * dirs * bs + 2 * b + 4 * h * dirs)


def workspace_bytes(
    call: LstmCall, table: str = DEFAULT_ARCHITECTURE.cudnn_table
) -> tuple[int, list[str]]:
    """The workspace of a training (or inference) call, and what about it was not probed:
    a layer count (extrapolated linearly in the layers from the nearest probed ones), a hidden
    size outside the probed ones, an input size above the hidden size in training (bounded)."""
    if call.proj:
        return _proj_workspace(call, table)
    dtype, layers, dirs, infer = call.dtype, call.layers, call.dirs, call.infer
    b, s, h = call.batch, call.seq, call.hidden
    mode = "|infer" if infer else ""
    fits = {
        k: v
        for k, v in rnn_fits(table, call.kind).items()
        if k.startswith(f"{dtype}|") and k.endswith("|infer") == infer
    }
    probed = sorted({int(k.split("|")[1]) for k in fits})
    said: list[str] = []

    def at(n_layers: int) -> float:
        value, note = _at_hidden(fits[f"{dtype}|{n_layers}|{dirs}{mode}"], b, s, h, call.tokens)
        if note and note not in said:
            said.append(note)
        return value

    size, how = _in_layers(layers, probed, at)
    if how:
        said.append(f"{layers} layers {how}")
    if call.input_size > h and not infer:
        said.append("an input size above the hidden size bounded from above")
    if call.tokens:
        said.append("a packed batch's bounded from above")
    return max(0, round(size * call.element) + _input_term(call)), said


def _in_layers(layers: int, probed: list[int], at: Callable[[int], float]) -> tuple[float, str]:
    """``at(layers)`` where that layer count was probed; else linear in the layers from the
    two nearest probed counts, and how (``interpolated`` between them, else ``extrapolated``)."""
    if layers in probed:
        return at(layers), ""
    lo, hi = (probed[-2], probed[-1]) if layers > probed[-1] else (probed[0], probed[1])
    low, high = at(lo), at(hi)
    how = "interpolated" if probed[0] < layers < probed[-1] else "extrapolated"
    return low + (high - low) * (layers - lo) / (hi - lo), how


def reserve_bytes(
    layers: int, dirs: int, b: int, s: int, h: int, e: int, kind: str = "lstm"
) -> int:
    """cuDNN's LSTM (GRU) reserve space (training only), exact on every probed configuration:
    ``(6*layers - 1)`` (a GRU's ``7*layers - 1``) times ``dirs*B*S*H`` elements, and 256."""
    per_layer = 7 if kind == "gru" else 6
    return (per_layer * layers - 1) * dirs * b * s * h * e + 256


def proj_reserve_bytes(layers: int, dirs: int, steps: int, h: int, proj: int, e: int) -> int:
    """The reserve space of an LSTM with projections (training only) over ``steps`` time steps
    of all sequences: ``(7*layers - 1)*H + layers*P`` elements per step and direction, and 256
    bytes, exact on every training probe at both shares measured (``P = H/2``: an H200's 32;
    ``P = 3H/8``: an H100's 96, at 64 and 256 steps)."""
    return ((7 * layers - 1) * h + layers * proj) * dirs * steps * e + 256


def _proj_fits(table: str, call: LstmCall, said: list[str]) -> dict[int, dict[str, Any]]:
    """The projected-LSTM fits of the call's dtype, mode and directions by layer count (bf16
    takes fp16's, which it was not probed beside: said; inference training's where it has no
    fits of its own)."""
    fits: dict[str, Any] = cudnn_data(table).get("lstm_proj_workspace", {})
    dtype = call.dtype
    if fits and not any(k.startswith(f"{dtype}|") for k in fits):
        said.append(f"with projections in {dtype} taken as fp16's")
        dtype = "fp16"
    of_dtype = {k: v for k, v in fits.items() if k.startswith(f"{dtype}|")}
    infer = call.infer and any(k.endswith("|infer") for k in of_dtype)
    return {
        int(k.split("|")[1]): v
        for k, v in of_dtype.items()
        if k.endswith("|infer") == infer and int(k.split("|")[2]) == call.dirs
    }


def _proj_workspace(call: LstmCall, table: str) -> tuple[int, list[str]]:
    """The workspace of an LSTM with projections: the probed form at the probed length
    (``build_cudnn_table.lstm_proj_workspace_fits``), layer counts between or beyond the probed
    ones linear in the layers, and above the truth where not probed:
    - another length S: the form at its length times ``max(1, S/S0)``, which bounds ``a*B*S
      + b*B + c*S + g`` (the plain LSTM's form) from above for non-negative terms;
    - another projection share: at least the plain LSTM's workspace at the hidden size;
    - a packed batch: as padded; an input size other than the hidden size: the plain term."""
    said: list[str] = []
    fits = _proj_fits(table, call, said)
    if not fits:  # a table without projected LSTMs
        plain, said = workspace_bytes(replace(call, proj=0), table)
        return plain, [*said, "with projections not probed: the plain LSTM's taken"]
    h, b = call.hidden, call.batch

    def at(n_layers: int) -> float:
        (u1, u0), (v2, v1) = fits[n_layers]["u"], fits[n_layers]["v"]
        return float((u1 * h + u0) * b + v2 * h * h + v1 * h)

    size, how = _in_layers(call.layers, sorted(fits), at)
    if how:
        said.append(f"{call.layers} layers with projections {how}")
    fit = next(iter(fits.values()))  # the hidden sizes, length and share probed, as all
    if not fit["h"][0] <= h <= fit["h"][1]:
        said.append(f"hidden size {h} with projections outside the probed ones")
    if call.seq != fit["seq"]:
        size *= max(1.0, call.seq / fit["seq"])
        said.append(f"with projections at {call.seq} steps bounded from {fit['seq']} steps'")
    nbytes = math.ceil(size * call.element)
    if abs(call.proj / h - fit["share"]) > 1e-9:
        plain, _ = workspace_bytes(replace(call, proj=0, input=0, tokens=0), table)
        nbytes = max(nbytes, plain)
        said.append(f"a projection of {call.proj} of {h} units bounded from above")
    if call.tokens:
        said.append("a packed batch's bounded from above")
    if call.input_size > h and not call.infer:
        said.append("an input size above the hidden size bounded from above")
    return max(0, nbytes + _input_term(call)), said
