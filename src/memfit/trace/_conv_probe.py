"""cuDNN's convolution workspaces measured on a GPU: one probe per convolution configuration.

A convolution's workspace is whatever the engine cuDNN picks takes, which only the GPU tells
(``_cudnn``). A probe runs the convolution alone (its forward, and in training its backward)
with the allocator's history on, and splits the history into the tensors the convolution makes
(output, input and weight gradients, bias gradient) and what each phase takes besides: the
forward's, the input gradient's and the weight gradient's workspaces, and the bias gradient's
reduction's scratch. The table in the package is built from such probes
(``benchmarks/build_cudnn_table.py``); ``memfit estimate --probe-convolutions`` runs them for a
workload's own convolutions on the user's GPU (``_user_table``).

A configuration is a dict: ``c``, (``d``,) ``h``, ``w``, ``k``, ``kernel``, ``stride``,
``padding``, ``groups``, ``bias``, ``batch``, ``dtype`` (``fp32``, ``bf16``, ``fp16``), and
where they apply ``dilation``, ``transposed``, ``output_padding``, ``nhwc`` (channels-last).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from memfit._gpus import Architecture
from memfit.trace import _cudnn
from memfit.trace._cudnn import ConvShape, _out_size

__all__ = [
    "DTYPES",
    "ELEMENT",
    "ProbeRun",
    "config_key",
    "config_of",
    "conv_module",
    "io_elements",
    "output_spatial",
    "probe_conv",
    "probe_unanswered",
    "record",
    "recorded_convolutions",
    "save_probes",
    "spatial",
    "split_workspaces",
    "table_answers",
    "unanswered",
]

# the table's dtype names (``_cudnn``'s own), both ways, and their element sizes
DTYPES = {name: dtype for dtype, name in _cudnn._DTYPES.items()}
ELEMENT = _cudnn._ITEM_SIZES
# the phase each allocation after the n-th of the convolution's own tensors belongs to
_PHASES = ("fwd", "dgrad", "dgrad", "wgrad", "bias")


def spatial(p: dict[str, Any]) -> list[int]:
    """A configuration's spatial sizes: (depth,) height and width (a 1-d convolution is the
    2-d one of height 1 that cuDNN runs)."""
    return [p["d"], p["h"], p["w"]] if "d" in p else [p["h"], p["w"]]


def output_spatial(p: dict[str, Any]) -> list[int]:
    """The output's spatial sizes, from the configuration's parameters."""
    n = len(p["kernel"])
    dilation = p.get("dilation") or [1] * n
    out_pad = p.get("output_padding") or [0] * n
    transposed = bool(p.get("transposed"))
    return [
        _out_size(size, k, s, pad, d, transposed) + (op if transposed else 0)
        for size, k, s, pad, d, op in zip(
            spatial(p), p["kernel"], p["stride"], p["padding"], dilation, out_pad, strict=True
        )
    ]


def _own_tensors(p: dict[str, Any]) -> list[int]:
    """The tensors the convolution itself allocates, in the order a training call makes them:
    output, the gradient given to its backward, input gradient, weight gradient (and bias's)."""
    e = ELEMENT[p["dtype"]]
    out = p["batch"] * p["k"] * math.prod(output_spatial(p)) * e
    grad_in = p["batch"] * p["c"] * math.prod(spatial(p)) * e
    # (in, out / groups, ...) for a transposed one: the same count
    grad_w = p["k"] * (p["c"] // p["groups"]) * math.prod(p["kernel"]) * e
    sizes = [out, out, grad_in, grad_w]
    return [*sizes, p["k"] * e] if p["bias"] else sizes


def split_workspaces(p: dict[str, Any]) -> dict[str, list[int]]:
    """One probe's history (``p["trace"]``: action and size pairs) split into the transient
    allocations of each phase: ``fwd``, ``dgrad``, ``wgrad`` and ``bias`` (what the bias
    gradient's reduction takes after the bias gradient is made: a channels-last gradient's
    sum, 4x the output's bf16 bytes for ConvNeXt's depthwise layers)."""
    expected = _own_tensors(p) if p["train"] else _own_tensors(p)[:1]
    found: dict[str, list[int]] = {"fwd": [], "dgrad": [], "wgrad": [], "bias": []}
    matched = 0
    for action, size in p["trace"]:
        if action != "alloc":
            continue
        if matched < len(expected) and size == expected[matched]:
            matched += 1
            continue
        phase = _PHASES[matched - 1]
        if phase in found:
            found[phase].append(size)
    if matched != len(expected):
        # not cuDNN's order: PyTorch's own depthwise kernels, which make the weight gradient
        # first and take no workspace (what else they allocate is the bias gradient's sum)
        allocs = Counter(size for action, size in p["trace"] if action == "alloc")
        if Counter(expected) - allocs:
            raise ValueError(f"probe trace does not match the convolution's own tensors: {p}")
        return {"fwd": [], "dgrad": [], "wgrad": [], "bias": []}
    return found


def config_key(p: dict[str, Any]) -> str:
    """The table's key of a configuration (:meth:`memfit.trace._cudnn.ConvShape.key`)."""
    return ConvShape(
        c=p["c"],
        spatial=tuple(spatial(p)),
        k=p["k"],
        kernel=tuple(p["kernel"]),
        stride=tuple(p["stride"]),
        padding=tuple(p["padding"]),
        groups=p["groups"],
        dtype=p["dtype"],
        dilation=tuple(p.get("dilation", ())),
        transposed=bool(p.get("transposed")),
        output_padding=tuple(p.get("output_padding", ())),
        nhwc=bool(p.get("nhwc")),
    ).key()


def config_of(table_key: str, batch: int, bias: bool) -> dict[str, Any]:
    """The configuration of a table key (``config_key``'s inverse) at ``batch``."""
    fields_text, dtype, *tags = table_key.split("|")
    fields = [int(f) for f in fields_text.split(",")]
    n = (len(fields) - 3) // 4  # c, spatial n, k, kernel n, stride n, padding n, groups
    c, dims, k = fields[0], fields[1 : 1 + n], fields[1 + n]
    kernel, stride, padding = (fields[2 + n + i * n : 2 + n + (i + 1) * n] for i in range(3))
    cfg: dict[str, Any] = {"c": c, **dict(zip(("d", "h", "w")[3 - n :], dims, strict=True))}
    cfg.update(k=k, kernel=kernel, stride=stride, padding=padding, groups=fields[-1])
    cfg.update(bias=bias, batch=batch, dtype=dtype)
    for tag in tags:
        name, _, values = tag.partition("=")
        numbers = [int(v) for v in values.split(",")] if values else []
        if name == "nhwc":
            cfg["nhwc"] = True
        elif name == "dil":
            cfg["dilation"] = numbers
        elif name == "tr":
            cfg["transposed"] = True
            if numbers:
                cfg["output_padding"] = numbers
    return cfg


# -- on the GPU ------------------------------------------------------------------------------


def record(fn: Callable[[], None]) -> list[list[Any]]:
    """The allocator's (action, size) history of ``fn`` on the current CUDA device: its
    allocations and completed frees, in order."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(context=None, stacks="python")
    fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    return [
        [e["action"], e["size"]]
        for e in snap["device_traces"][torch.cuda.current_device()]
        if e["action"] in ("alloc", "free_completed")
    ]


def conv_module(cfg: dict[str, Any]) -> nn.Module:
    """The convolution of a configuration: 2-d (a 1-d one as cuDNN runs it: height 1) or 3-d,
    dilated or not, transposed or not."""
    n = len(cfg["kernel"])
    common = {"groups": cfg["groups"], "bias": cfg["bias"], "dilation": cfg.get("dilation", 1)}
    args = (cfg["c"], cfg["k"], cfg["kernel"], cfg["stride"], cfg["padding"])
    if cfg.get("transposed"):
        cls: Any = nn.ConvTranspose3d if n == 3 else nn.ConvTranspose2d
        return cls(*args, output_padding=cfg.get("output_padding", 0), **common)  # type: ignore[no-any-return]
    return (nn.Conv3d if n == 3 else nn.Conv2d)(*args, **common)


def probe_conv(cfg: dict[str, Any], batch: int, dtype: str, train: bool) -> dict[str, Any]:
    """The configuration run once to warm cuDNN (its handles, its choice of engine), then once
    more with the allocator's history recorded: the configuration with its ``trace``."""
    conv = conv_module(cfg).cuda().to(DTYPES[dtype])
    x = torch.randn(batch, cfg["c"], *spatial(cfg), device="cuda", dtype=DTYPES[dtype])
    if cfg.get("nhwc"):
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(train)

    def run() -> None:
        if train:
            y = conv(x)
            y.backward(torch.ones_like(y))
        else:
            with torch.no_grad():
                conv(x)

    run()
    conv.zero_grad(set_to_none=True)
    x.grad = None
    trace = record(run)
    return {**cfg, "batch": batch, "dtype": dtype, "train": train, "trace": trace}


# -- which convolutions a trace meets, and which the table answers --------------------------


def _call_config(args: tuple[Any, ...], batch: int) -> dict[str, Any] | None:
    """The configuration of an ``aten.convolution`` call (1-, 2- or 3-d, dilated or
    transposed), read off memfit's own key of it; None where the table keys none (a dtype it
    does not hold)."""
    x, weight, bias, stride, padding, dilation, transposed, out_pad, groups = args[:9]
    key = _cudnn._key(x, weight, stride, padding, int(groups), dilation, transposed, out_pad)
    return None if key is None else config_of(key, batch, bias is not None)


def table_answers(cfg: dict[str, Any], train: bool, sm: int = 90) -> bool:
    """Whether the table (with this machine's probes for compute capability ``sm``) holds the
    configuration's key at its batch for every phase it runs."""
    entry = _cudnn._table(Architecture(sm).cudnn_table, sm).get(config_key(cfg))
    if entry is None:
        return False
    phases = ("fwd", "dgrad", "wgrad") if train else ("fwd",)
    return all(str(cfg["batch"]) in entry.get(p, {}) for p in phases if entry.get(p))


@contextlib.contextmanager
def recorded_convolutions() -> Iterator[dict[str, dict[str, Any]]]:
    """The convolutions traced while this lasts, one per configuration (``train`` where the
    trace ran its backward)."""
    seen: dict[str, dict[str, Any]] = {}
    forward, backward = _cudnn.ConvWorkspaces.forward, _cudnn.ConvWorkspaces.backward

    def keep(cfg: dict[str, Any] | None, train: bool) -> None:
        if cfg is not None:
            cfg = {**cfg, "train": train}
            seen.setdefault(json.dumps(cfg, sort_keys=True), cfg)

    def on_forward(self: Any, args: tuple[Any, ...]) -> list[int]:
        keep(_call_config(args, int(args[0].shape[0])), False)
        return forward(self, args)

    def on_backward(self: Any, args: tuple[Any, ...]) -> dict[int, list[int]]:
        _, x, weight, _, stride, padding, dilation, transposed, out_pad, groups, mask = args[:11]
        bias: list[Any] | None = [] if mask[2] else None  # present or not: the module's
        call = (x, weight, bias, stride, padding, dilation, transposed, out_pad, groups)
        keep(_call_config(call, int(x.shape[0])), True)
        return backward(self, args)

    _cudnn.ConvWorkspaces.forward = on_forward  # type: ignore[method-assign]
    _cudnn.ConvWorkspaces.backward = on_backward  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        _cudnn.ConvWorkspaces.forward = forward  # type: ignore[method-assign]
        _cudnn.ConvWorkspaces.backward = backward  # type: ignore[method-assign]


def unanswered(configs: list[dict[str, Any]], sm: int) -> list[dict[str, Any]]:
    """The configurations the table does not answer exactly (their key, or their batch), a
    training one where both ran; largest first (by the larger of input and output)."""
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    for cfg in configs:
        slot = (config_key(cfg), int(cfg["batch"]))
        if slot not in by_key or cfg["train"]:
            by_key[slot] = cfg
    missing = [c for c in by_key.values() if not table_answers(c, c["train"], sm)]
    return sorted(missing, key=io_elements, reverse=True)


def io_elements(cfg: dict[str, Any]) -> int:
    """The larger of a configuration's input and output elements, over its batch."""
    inputs = int(cfg["c"]) * math.prod(spatial(cfg))
    outputs = int(cfg["k"]) * math.prod(output_spatial(cfg))
    return int(cfg["batch"]) * max(inputs, outputs)


# -- this machine's table --------------------------------------------------------------------


def save_probes(probes: list[dict[str, Any]], sm: int) -> Path:
    """Add probes (``probe_conv``'s rows, run on a GPU of compute capability ``sm``) to this
    machine's table (``_cudnn.user_table_path``), keeping what it holds; returns its path."""
    path = _cudnn.user_table_path(sm)
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        document = {"conv": {}}
    conv = document.setdefault("conv", {})
    for p in probes:
        entry = conv.setdefault(config_key(p), {})
        found = split_workspaces(p)
        for phase in ("fwd", "dgrad", "wgrad", "bias") if p["train"] else ("fwd",):
            entry.setdefault(phase, {})[str(p["batch"])] = found[phase]
    document["meta"] = {
        "date": dt.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "source": "memfit estimate --probe-convolutions",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(document, sort_keys=True))
    partial.replace(path)  # whole or not at all: a full disk leaves the old file
    return path


# -- a workload's convolutions, probed --------------------------------------------------------


@dataclass(frozen=True)
class ProbeRun:
    """The configurations a workload runs that the table did not answer, those measured, those
    that could not run here (their keys, and why), and this machine's table."""

    missing: int
    probed: int
    failed: tuple[str, ...]
    path: Path


def probe_unanswered(
    workload: Any, target: Any, sm: int, progress: Callable[[int, int], None] | None = None
) -> ProbeRun:
    """Trace ``workload`` for ``target`` (on meta tensors), then probe on this machine's CUDA
    GPU (of compute capability ``sm``) each of its convolutions the table does not answer,
    largest first, and keep them (``save_probes``), even when interrupted."""
    from memfit.trace._tracer import trace_workload

    with recorded_convolutions() as seen:
        trace_workload(workload, target)
    configs = unanswered(list(seen.values()), sm)
    probes, failed = [], []
    try:
        for done, cfg in enumerate(configs, 1):
            shape = {k: v for k, v in cfg.items() if k not in ("batch", "dtype", "train")}
            where = f"{config_key(cfg)} at batch {cfg['batch']}"
            try:
                probe = probe_conv(shape, cfg["batch"], cfg["dtype"], cfg["train"])
                split_workspaces(probe)  # a history it cannot read is not kept
                probes.append(probe)
            except torch.OutOfMemoryError:
                failed.append(f"{where}: out of memory beside what the process holds")
            except ValueError:
                failed.append(f"{where}: its allocations are not the ones memfit reads")
            finally:
                torch.cuda.empty_cache()
            if progress is not None:
                progress(done, len(configs))
    finally:  # each probe stands on its own: an interrupt keeps those made
        path = save_probes(probes, sm) if probes else _cudnn.user_table_path(sm)
    return ProbeRun(len(configs), len(probes), tuple(failed), path)
