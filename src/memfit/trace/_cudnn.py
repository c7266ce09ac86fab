"""cuDNN convolution workspaces, from measurements on a real GPU.

cuDNN chooses a convolution engine by its own heuristics and takes that engine's workspace from
the caching allocator for the duration of the call: nothing else in the step is as large and as
short-lived (257 MB for ResNet-50's 7x7 stem at batch 128 in fp16, next to a 205 MB output).
The size depends on the engine, which cannot be derived from the shapes, so memfit looks it up in
a table measured on an H200 (``benchmarks/cudnn_probe.py`` -> ``benchmarks/build_cudnn_table.py``)
for the convolutions of the catalog's CNNs, per dtype and layout (channels-last where the model
hands cuDNN a permuted tensor), at batch 32 and 128 and others; and after a bias gradient, the
scratch its reduction takes (a channels-last one: 4x the output's bf16 bytes). Other batch sizes are
interpolated (most workspaces grow linearly with the batch). A 1-D convolution is looked up as
the 2-D one of height 1 that PyTorch hands cuDNN; 3-D, dilated and transposed convolutions
key apart (:class:`ConvShape`). A convolution not in the table (a shape no probe ran) is given a
workspace from the table: the larger of its input and output bytes times a ratio read off the
same table, the one 95% of its large convolutions' workspaces stay under, phase by phase.
Counting none would be
the unsafe side: the zoo sweep on an H100 found estimates of networks with such convolutions up
to a third under the real peaks. The ratio is a bound for most convolutions, not for all: cuDNN
can pick an engine with a larger workspace for one shape and batch and none for the next. On
21 held-out models measured on an H100 (2026-12-07), estimates with such convolutions ranged
from 1.8% under the peak reserved to 65% over it; with those convolutions probed, all were
within 0.6%. Both cases are named in the estimate's notes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from memfit._data_dirs import data_dir
from memfit._gpus import DEFAULT_ARCHITECTURE
from memfit.trace._layouts import channels_last

__all__ = ["ConvWorkspaces", "cudnn_data"]

_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
_ITEM_SIZES = {name: dtype.itemsize for dtype, name in _DTYPES.items()}


@functools.cache
def cudnn_data(table: str) -> dict[str, Any]:
    """A measured cuDNN table (``memfit/trace/data``, named by
    :attr:`memfit._gpus.Architecture.cudnn_table`), read once."""
    text = resources.files("memfit.trace").joinpath(f"data/{table}").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


Conv = dict[str, dict[str, dict[str, list[int]]]]  # key -> phase -> batch -> workspaces


def _packaged(table: str = DEFAULT_ARCHITECTURE.cudnn_table) -> Conv:
    conv: Conv = cudnn_data(table)["conv"]
    return conv


def user_table_path(sm: int = DEFAULT_ARCHITECTURE.sm) -> Path:
    """The workspaces ``memfit estimate --probe-convolutions`` measured on this machine's GPUs
    of compute capability ``sm`` (90: Hopper): ``cudnn_sm<sm>.json`` in ``$MEMFIT_CUDNN_DIR``,
    else under memfit's data folder (``memfit._data_dirs``)."""
    return data_dir("cudnn", "MEMFIT_CUDNN_DIR") / f"cudnn_sm{sm}.json"


@functools.cache
def _with_user(table: str, path: str, stamp: int) -> tuple[Conv, frozenset[str]]:
    """The packaged table with the user's probes filling what it lacks (a key, or a batch of
    a phase), and the keys that took something from the user's file. ``stamp`` (the file's
    modification time) makes a rewritten file read again."""
    try:
        user: Conv = json.loads(Path(path).read_text())["conv"]
    except (OSError, ValueError, KeyError, TypeError):
        return _packaged(table), frozenset()  # unreadable: as if there were none
    merged: Conv = {k: {ph: dict(b) for ph, b in v.items()} for k, v in _packaged(table).items()}
    taken = set()
    for key, phases in user.items():
        entry = merged.setdefault(key, {})
        for phase, by_batch in phases.items():
            known = entry.setdefault(phase, {})
            for batch, sizes in by_batch.items():
                if batch not in known:
                    known[batch] = sizes
                    taken.add(key)
    return merged, frozenset(taken)


def _table_and_user_keys(
    table: str = DEFAULT_ARCHITECTURE.cudnn_table, sm: int = DEFAULT_ARCHITECTURE.sm
) -> tuple[Conv, frozenset[str]]:
    """The table a lookup for a GPU of compute capability ``sm`` reads, and the keys in it
    that took this machine's probes."""
    path = user_table_path(sm)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return _packaged(table), frozenset()
    return _with_user(table, str(path), stamp)


def _table(
    table: str = DEFAULT_ARCHITECTURE.cudnn_table, sm: int = DEFAULT_ARCHITECTURE.sm
) -> Conv:
    """The table a lookup reads: the packaged one, with this machine's probes where any."""
    return _table_and_user_keys(table, sm)[0]


@dataclass(frozen=True)
class ConvShape:
    """A convolution as cuDNN runs it (a 1-d one already made the 2-d one of height 1):
    channels, spatial sizes, output channels, kernel, stride, padding, groups, the table's
    dtype name, and where they differ from a plain one, dilation, transposition (and its
    output padding) and a channels-last input (other engines, probed apart)."""

    c: int
    spatial: tuple[int, ...]
    k: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    groups: int
    dtype: str
    dilation: tuple[int, ...] = ()
    transposed: bool = False
    output_padding: tuple[int, ...] = ()
    nhwc: bool = False

    def key(self) -> str:
        """The table's key: the fields, then ``|dtype``, ``|nhwc``, ``|dil=...`` where a
        dilation is not 1 and ``|tr`` (``|tr=...`` with an output padding) for a transposed
        one. The probe's configurations key the same way (``benchmarks/build_cudnn_table.py``)."""
        fields = [self.c, *self.spatial, self.k, *self.kernel, *self.stride, *self.padding]
        tags = [self.dtype]
        if self.nhwc:
            tags.append("nhwc")
        if any(d != 1 for d in self.dilation):
            tags.append("dil=" + ",".join(map(str, self.dilation)))
        if self.transposed:
            pads = ",".join(map(str, self.output_padding))
            tags.append(f"tr={pads}" if any(self.output_padding) else "tr")
        return ",".join(map(str, [*fields, self.groups])) + "|" + "|".join(tags)


def _key(
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    groups: int,
    dilation: Sequence[int] = (),
    transposed: bool = False,
    output_padding: Sequence[int] = (),
) -> str | None:
    """The key of an ``aten.convolution`` call's arguments (None: no dtype the table keys, or
    not a 1-, 2- or 3-d convolution)."""
    dtype = _DTYPES.get(x.dtype)
    if dtype is None or x.dim() != weight.dim() or x.dim() not in (3, 4, 5):
        return None
    n = x.dim() - 2

    def full(values: Sequence[int], default: int) -> list[int]:
        # a parameter of one value stands for every dimension, as ATen expands it
        items = [int(v) for v in values] or [default]
        return items * n if len(items) == 1 else items

    # a transposed convolution's weight is (in, out / groups, ...)
    k = int(weight.shape[1]) * groups if transposed else int(weight.shape[0])
    spatial, kernel = [int(s) for s in x.shape[2:]], [int(s) for s in weight.shape[2:]]
    params = [
        full(v, d) for v, d in ((stride, 1), (padding, 0), (dilation, 1), (output_padding, 0))
    ]
    if n == 1:
        # ATen's _convolution runs a 1-d convolution as a 2-d one of height 1 (``view4d`` of
        # the input made contiguous and of the weight, ``view1d_as_2d`` of the parameters):
        # cuDNN sees, and the table keys, (N, C, 1, L) by (K, C / groups, 1, kL)
        spatial, kernel = [1, *spatial], [1, *kernel]
        params = [[d, *v] for v, d in zip(params, (1, 0, 1, 0), strict=True)]
    st, pad, dil, out_pad = (tuple(v) for v in params)
    # cuDNN runs a channels-last convolution with other engines, measured apart (|nhwc: the
    # probe runs a convolution channels-last where the model hands it a permuted tensor)
    shape = ConvShape(
        int(x.shape[1]), tuple(spatial), k, tuple(kernel), st, pad, groups, dtype,
        dilation=dil, transposed=transposed, output_padding=out_pad,
        nhwc=n == 2 and channels_last(x),
    )  # fmt: skip
    return shape.key()


def _at_batch(by_batch: dict[str, list[int]], batch: int) -> tuple[list[int], bool]:
    """Workspaces at ``batch``: measured, or interpolated linearly between the probed sizes."""
    if str(batch) in by_batch:
        return by_batch[str(batch)], True
    probed = sorted(int(b) for b in by_batch)
    below = [b for b in probed if b < batch]
    above = [b for b in probed if b > batch]
    if below and above:
        b0, b1 = below[-1], above[0]
        w0, w1 = by_batch[str(b0)], by_batch[str(b1)]
        if len(w0) == len(w1):
            t = (batch - b0) / (b1 - b0)
            return [round(a + (b - a) * t) for a, b in zip(w0, w1, strict=True)], False
    nearest = min(probed, key=lambda b: abs(b - batch))
    return [round(s * batch / nearest) for s in by_batch[str(nearest)]], False


class ConvWorkspaces:
    """Looks up what cuDNN allocates inside each convolution of a trace, and counts misses;
    ``table`` is the architecture's measured table."""

    def __init__(
        self, table: str = DEFAULT_ARCHITECTURE.cudnn_table, sm: int = DEFAULT_ARCHITECTURE.sm
    ) -> None:
        self.table = table
        self.sm = sm  # the target's compute capability: this machine's probes of it count
        # read once per trace, not at each of its convolutions
        self._conv, self._user_keys = _table_and_user_keys(table, sm)
        self.interpolated = 0
        self.unknown: set[str] = set()
        self.from_user: set[str] = set()  # keys answered by this machine's probes

    def forward(self, args: tuple[Any, ...]) -> list[int]:
        x, weight, _, stride, padding, dilation, transposed, out_pad, groups = args[:9]
        shape = (x, weight, stride, padding, dilation, transposed, out_pad)
        return self._lookup(shape, int(groups), ["fwd"])

    def backward(self, args: tuple[Any, ...]) -> dict[int, list[int]]:
        """Workspaces by the output they follow: 0 the input gradient, 1 the weight gradient,
        2 the bias gradient (its reduction's scratch: in the tables probed from 2026-12-02 on)."""
        _, x, weight, _, stride, padding, dilation, transposed, out_pad, groups, mask = args[:11]
        shape = (x, weight, stride, padding, dilation, transposed, out_pad)
        return {
            i: self._lookup(shape, int(groups), [phase])
            for i, phase in enumerate(("dgrad", "wgrad", "bias"))
            if mask[i]
        }

    def _lookup(
        self,
        shape: tuple[Any, ...],  # input, weight, stride, padding, dilation, transposed, out pad
        groups: int,
        phases: list[str],  # of "fwd", "dgrad", "wgrad", "bias"
    ) -> list[int]:
        x, weight, stride, padding, dilation, transposed, out_pad = shape
        key = _key(x, weight, stride, padding, groups, dilation, bool(transposed), out_pad)
        if key is None:
            return self._bounded(shape[:6], groups, phases, f"{x.dim() - 2}-d")
        entry = self._conv.get(key)
        if key in self._user_keys:
            self.from_user.add(key)
        if entry is None:
            fields, _, tags = key.partition("|")
            what = "|".join([fields, *(t for t in tags.split("|")[1:] if t != "nhwc")])
            return self._bounded(shape[:6], groups, phases, what)
        out: list[int] = []
        for phase in phases:
            if not entry.get(phase):  # a phase the table's probes did not split out
                continue
            sizes, exact = _at_batch(entry[phase], int(x.shape[0]))
            self.interpolated += not exact
            out += sizes
        return out

    def _bounded(
        self, shape: tuple[Any, ...], groups: int, phases: list[str], what: str
    ) -> list[int]:
        """The bound on the workspace of a convolution the table does not hold (see the
        module's doc), for each phase; ``what`` names it in the notes. A bias gradient's
        scratch is bounded only channels-last, where the table shows one."""
        x, weight, stride, padding, dilation, transposed = shape
        if x.dtype not in _DTYPES:
            return []
        self.unknown.add(what)
        output = _output_bytes(x, weight, stride, padding, dilation, transposed, groups)
        largest = max(_nbytes(x), output)
        kinds = _kinds(int(x.shape[1]), groups, weight.shape[2:], stride, padding)
        ratios = _bound_ratios(self.table)
        kept = [p for p in phases if p != "bias" or (x.dim() == 4 and channels_last(x))]
        bounds = [_ratio(ratios, kinds, phase) for phase in kept]
        return [round(largest * ratio) for ratio in bounds if ratio]

    def notes(self) -> list[str]:
        """What the estimate should say about the workspaces it could not read off the table."""
        notes = []
        if self.interpolated:
            notes.append(
                f"cuDNN workspaces of {self.interpolated} convolution calls interpolated "
                "from H200 measurements at other batch sizes"
            )
        if self.from_user:
            notes.append(
                f"cuDNN workspaces of {len(self.from_user)} convolution shapes read from the "
                f"ones probed on this machine ({user_table_path(self.sm)})"
            )
        if self.unknown:
            notes.append(
                f"{len(self.unknown)} convolution shapes have no measured cuDNN workspace: "
                "each is given the workspace 95% of the measured ones of its kind stay under "
                "(up to about twice its input or output): such estimates can be well above or "
                "below the GPU's peak reserved (object detectors at 800 x 1066 on an H100: 20% "
                "under to 23% over); --probe-convolutions measures them on this machine's GPU"
            )
        return notes


BOUND_SHARE = 0.95  # of the table's large convolutions whose workspace the bound covers
_LARGE = 16 * 2**20  # bytes of input or output from which a convolution counts as large


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


def _out_size(n: int, k: int, s: int, p: int, d: int = 1, transposed: bool = False) -> int:
    """One spatial dimension of a convolution's output (output padding left out)."""
    if transposed:
        return (n - 1) * s - 2 * p + d * (k - 1) + 1
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _output_bytes(
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    groups: int = 1,
) -> int:
    """The bytes of the convolution's output, from the shapes."""
    # a transposed convolution's weight is (in, out / groups, ...)
    channels = int(weight.shape[1]) * groups if transposed else int(weight.shape[0])
    count = int(x.shape[0]) * channels
    for i in range(x.dim() - 2):
        s, p, d = (int(v[i % len(v)]) for v in (stride, padding, dilation))
        size = _out_size(int(x.shape[2 + i]), int(weight.shape[2 + i]), s, p, d, transposed)
        count *= max(size, 0)
    return count * x.element_size()


def _kinds(
    channels: int,
    groups: int,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
) -> tuple[str, ...]:
    """The kinds of convolution a convolution is, the most specific last, as cuDNN's engines
    differ by them: depthwise, grouped, pointwise (every kernel dimension 1) or dense; and a
    dense one whose kernel steps by its own size without padding (a patch embedding) is also a
    patch one, whose engines take up to 3.8 times the input (a dense one's 95% stay under
    2.2: CLIP's 32x32 patches took 2.76 times, H100 traces)."""
    if groups > 1:
        return ("depthwise",) if groups == channels else ("grouped",)
    if all(int(k) == 1 for k in kernel):
        return ("pointwise",)
    n = len(kernel)
    tiles = all(
        int(kernel[i]) == int(stride[i % len(stride)]) and int(padding[i % len(padding)]) == 0
        for i in range(n)
    )
    return ("dense", "patch") if tiles else ("dense",)


def _ratio(ratios: dict[tuple[str, str], float], kinds: Sequence[str], phase: str) -> float:
    """The bound's ratio for the most specific of ``kinds`` the table has enough samples of
    (none: the ratio over every kind)."""
    for kind in reversed(kinds):
        if (kind, phase) in ratios:
            return ratios[kind, phase]
    return ratios.get(("", phase), 0.0)


_MIN_SAMPLES = 20  # fewer of a kind and phase in the table: the bound over every kind


@functools.cache
def _bound_ratios(table: str) -> dict[tuple[str, str], float]:
    """Per kind of convolution (``""``: every kind; a patch one counts as dense too) and phase,
    the workspace over the larger of input and output bytes that :data:`BOUND_SHARE` of the
    table's large convolutions stay under (none taken counts). Depthwise convolutions' forward
    takes none in the table."""
    samples: dict[tuple[str, str], list[float]] = {}
    for key, phases in _packaged(table).items():
        fields, dtype, *tags = key.split("|")
        if len(fields.split(",")) != 11 or set(tags) - {"nhwc"}:
            continue  # 3-d, dilated, transposed: too few of each, and the bound keys none
        c, h, w, k, kh, kw, sh, sw, ph, pw, g = (int(f) for f in fields.split(","))
        size = _ITEM_SIZES[dtype]
        ho, wo = _out_size(h, kh, sh, ph), _out_size(w, kw, sw, pw)
        kinds = ("", *_kinds(c, g, (kh, kw), (sh, sw), (ph, pw)))
        for phase, by_batch in phases.items():
            for batch, sizes in by_batch.items():
                largest = max(c * h * w, k * ho * wo) * int(batch) * size
                if largest >= _LARGE:
                    for kind in kinds:
                        samples.setdefault((kind, phase), []).append(sum(sizes) / largest)
    ratios = {}
    for (kind, phase), values in samples.items():
        if len(values) >= _MIN_SAMPLES:
            values.sort()
            ratios[kind, phase] = values[min(len(values) - 1, int(BOUND_SHARE * len(values)))]
    return ratios
