"""Build memfit's table of cuDNN convolution workspaces from a probe run on a real GPU.

cuDNN picks a convolution engine by its own heuristics (``torch.backends.cudnn.benchmark`` off)
and takes the engine's workspace from the caching allocator for the duration of the call. The
size depends on the engine, so it cannot be derived from the shapes alone; this script reads the
allocator traces that ``benchmarks/cudnn_probe.py`` recorded for each convolution configuration
and writes, per configuration, dtype and batch size, the workspaces of the forward pass, of the
input gradient (dgrad) and of the weight gradient (wgrad).

    python benchmarks/build_cudnn_table.py PROBE.json.gz [MORE.json.gz ...] \
        src/memfit/trace/data/cudnn_sm90.json

The table in the package is built from every probe so far, in this order (the meta's
``command`` lists them): ``results/2026-11-30-h200-estimate-accuracy/cudnn_probe.json.gz``,
``results/2026-11-30-h200-finder-monitor-cudnn/cudnn_probe_conv.json.gz`` and
``cudnn_probe_lstm.json.gz``,
``results/2026-12-01-h200-user-steps-compiled/cudnn/cudnn_probe_families.json.gz`` and
``cudnn_probe_regnet.json.gz``, and
``results/2026-12-02-h200-activation-offload/cudnn_probe_convnext_nhwc.json.gz`` (ConvNeXt-T's
channels-last convolutions), and the H100's
``results/2026-12-06-h100-zoo-convolutions/zoo-convs-probe.json.gz`` (the zoo sweep's 10,191
convolutions at its batches, ``zoo_convs.py``), then
``results/2026-12-06-h100-conv-probes/zoo-convs-probe.json.gz`` and ``op-convs-probe.json.gz``
(the zoo's 1-d, 3-d, dilated and transposed convolutions and transformers' 2-d ones; the op
sweep's), then ``results/2026-12-07-h100-zoo-held-out-convolutions/held-convs-probe.json.gz``
(the held-out transformers types' convolutions) and
``results/2026-12-07-h100-new-families-convolutions/new-convs-probe.json.gz`` (the depth,
upscaling and contrastive types' and the third hand-written set's). Per configuration and
phase: the forward's workspaces, the input gradient's, the weight gradient's, and the bias
gradient's reduction's.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import Counter
from typing import Any

ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
# Hopper chips of one engine set: cuDNN picks the same engines on both (12 configurations the
# H200 probed, probed again on an H100, took the same workspaces: results/2026-12-06-h100-zoo-
# convolutions); a table of sm90 takes probes from either
SM90 = ("H100", "H200")
PHASES = ("fwd", "dgrad", "dgrad", "wgrad", "bias")


def spatial(p: dict[str, Any]) -> list[int]:
    """A configuration's spatial sizes: (depth,) height and width (a 1-d convolution is the
    2-d one of height 1 that cuDNN runs)."""
    return [p["d"], p["h"], p["w"]] if "d" in p else [p["h"], p["w"]]


def output_spatial(p: dict[str, Any]) -> list[int]:
    """The output's spatial sizes, from the configuration's parameters."""
    from memfit.trace._cudnn import _out_size

    n = len(p["kernel"])
    dilation = p.get("dilation") or [1] * n
    out_pad = p.get("output_padding") or [0] * n
    transposed = bool(p.get("transposed"))
    sizes = [
        _out_size(size, k, s, pad, d, transposed) + (op if transposed else 0)
        for size, k, s, pad, d, op in zip(
            spatial(p), p["kernel"], p["stride"], p["padding"], dilation, out_pad, strict=True
        )
    ]
    return sizes


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _sizes(p: dict[str, Any]) -> list[int]:
    """The tensors the convolution itself allocates, in the order a training call makes them."""
    e = ELEMENT[p["dtype"]]
    out = p["batch"] * p["k"] * _prod(output_spatial(p)) * e
    grad_in = p["batch"] * p["c"] * _prod(spatial(p)) * e
    # (in, out / groups, ...) for a transposed one: the same count
    grad_w = p["k"] * (p["c"] // p["groups"]) * _prod(p["kernel"]) * e
    sizes = [out, out, grad_in, grad_w]
    return [*sizes, p["k"] * e] if p["bias"] else sizes


def workspaces(p: dict[str, Any]) -> dict[str, list[int]]:
    """Split one probe's trace into the transient allocations of each phase of the call."""
    expected = _sizes(p) if p["train"] else _sizes(p)[:1]
    # "bias": what the bias gradient's reduction takes after the bias gradient is made (a
    # channels-last gradient's sum: 4x the output's bf16 bytes for ConvNeXt's depthwise layers)
    found: dict[str, list[int]] = {"fwd": [], "dgrad": [], "wgrad": [], "bias": []}
    matched = 0
    for action, size in p["trace"]:
        if action != "alloc":
            continue
        if matched < len(expected) and size == expected[matched]:
            matched += 1
            continue
        phase = PHASES[matched - 1]
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


def key(p: dict[str, Any]) -> str:
    """The table's key of a probe's configuration (``memfit.trace._cudnn.ConvShape``)."""
    from memfit.trace._cudnn import ConvShape

    lists = (spatial(p), p["kernel"], p["stride"], p["padding"])
    extra = (p.get("dilation", ()), p.get("output_padding", ()))
    return ConvShape(
        p["c"], tuple(lists[0]), p["k"], *(tuple(v) for v in lists[1:]), p["groups"],
        p["dtype"], dilation=tuple(extra[0]), transposed=bool(p.get("transposed")),
        output_padding=tuple(extra[1]), nhwc=bool(p.get("nhwc")),
    ).key()  # fmt: skip


def config_of(table_key: str, batch: int, bias: bool) -> dict[str, Any]:
    """The probe's configuration of a table key (``key``'s inverse) at ``batch``."""
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


def build(probe: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, dict[str, dict[str, list[int]]]] = {}
    for p in probe["conv"]:
        entry = table.setdefault(key(p), {"fwd": {}, "dgrad": {}, "wgrad": {}, "bias": {}})
        found = workspaces(p)
        batch = str(p["batch"])
        phases = ("fwd", "dgrad", "wgrad", "bias") if p["train"] else ("fwd",)
        for phase in phases:
            previous = entry[phase].get(batch)
            if previous is not None and previous != found[phase]:
                # the forward pass of a training probe ran the same engine as inference
                entry[phase][batch] = max(previous, found[phase], key=sum)
            else:
                entry[phase][batch] = found[phase]
    return {
        "meta": {**probe["meta"], "source": "benchmarks/cudnn_probe.py"},
        "conv": table,
        "lstm_workspace": lstm_workspace_fits(probe),
    }


def _transients(trace: list[list[Any]]) -> list[int]:
    """Sizes allocated and freed again within the trace (a kernel's scratch), in order."""
    live: dict[int, int] = {}
    out = []
    for action, size in trace:
        if action == "alloc":
            live[size] = live.get(size, 0) + 1
        elif live.get(size):
            live[size] -= 1
            out.append(size)
    return out


def lstm_workspace_fits(probe: dict[str, Any]) -> dict[str, list[float]]:
    """Least-squares fit, per (dtype, layers, directions[, infer]), of the LSTM workspace as
    H*e*(a*B*S + b*B + c*S + d) + k: exact to ~140 bytes on every probed configuration (the
    forward, input-gradient and weight-gradient calls all take the same size)."""
    import numpy as np

    rows: dict[str, tuple[list[list[float]], list[float]]] = {}
    for p in probe["lstm"]:
        b, s, h, layers = p["batch"], p["seq"], p["hidden"], p["layers"]
        e = ELEMENT[p["dtype"]]
        dirs = 2 if p["bidirectional"] else 1
        train = p.get("train", True)
        if train:
            reserve = (6 * layers - 1) * dirs * b * s * h * e + 256
            allocs = [size for action, size in p["trace"] if action == "alloc"]
            workspace = allocs[allocs.index(reserve) - 1]
        else:  # no reserve space: the workspace is the call's largest transient allocation
            workspace = max(_transients(p["trace"]))
        key = f"{p['dtype']}|{layers}|{dirs}" + ("" if train else "|infer")
        a, y = rows.setdefault(key, ([], []))
        a.append([h * e * b * s, h * e * b, h * e * s, h * e, 1.0])
        y.append(float(workspace))
    fits = {}
    for key, (a, y) in rows.items():
        coef = np.linalg.lstsq(np.array(a), np.array(y), rcond=None)[0]
        # + 0.0: a zero coefficient is written 0.0 whatever sign the solver left on it, so
        # the same probes give the same file on any BLAS
        fits[key] = [round(float(c), 4) + 0.0 for c in coef]
    return fits


def merge(probes: list[dict[str, Any]]) -> dict[str, Any]:
    """One probe document from several runs on the same GPU and library versions."""
    versions = {(p["meta"]["torch"], p["meta"]["cudnn"]) for p in probes}
    if len(versions) != 1:
        raise ValueError(f"probes from different library versions cannot be merged: {versions}")
    gpus = sorted({p["meta"]["gpu"] for p in probes})
    if not all(any(chip in gpu for chip in SM90) for gpu in gpus):
        raise ValueError(f"probes from GPUs other than sm90 ones cannot be merged: {gpus}")
    meta = dict(probes[0]["meta"])
    meta["gpu"] = " and ".join(gpus)
    meta["command"] = " | ".join(p["meta"]["command"] for p in probes)
    meta["date"] = max(p["meta"]["date"] for p in probes)
    return {
        "meta": meta,
        "conv": [c for p in probes for c in p["conv"]],
        "lstm": [x for p in probes for x in p["lstm"]],
    }


def main() -> int:
    *inputs, output = sys.argv[1:]
    probes = []
    for path in inputs:
        with gzip.open(path, "rt") as fh:
            probes.append(json.load(fh))
    table = build(merge(probes))
    with open(output, "w") as fh:
        json.dump(table, fh, separators=(",", ":"), sort_keys=True)
        fh.write("\n")
    print(f"{len(table['conv'])} configurations -> {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
