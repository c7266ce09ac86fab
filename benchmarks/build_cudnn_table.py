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
upscaling and contrastive types' and the third hand-written set's), then the H200's
``results/2026-12-07-h200-vision-language-convolutions/vlm-hw4-convs-probe.json.gz`` (the
vision-language types' and the fourth hand-written set's), and its LSTM probes
``results/2026-12-07-h200-lstm-probes/hidden-lstm-probe.json.gz`` (hidden sizes 32 to 512) and
``sequencer-lstm-probe.json.gz`` (Sequencer2d's shapes, batches up to 32,768), and the H100's
GRU probe ``results/2026-12-07-h100-rnn-probes/gru-probe.json.gz``, then
``results/2026-12-07-h100-detection-handwritten-convolutions/det-hw5-convs-probe.json.gz`` (the
object detectors' and the fifth hand-written set's convolutions), then the H200's
``results/2026-12-07-h200-probes-segmentation-sixth-rnn/hw6-convs-probe.json.gz`` and
``seg-convs-probe.json.gz``, and the run ``proj`` of its ``rnn-probes.json.gz`` (LSTMs with
projections; a run of a file of several is given as ``PATH:RUN``). Per configuration and
phase: the forward's workspaces, the input gradient's, the weight gradient's, and the bias
gradient's reduction's; per LSTM and GRU engine, the workspace's closed form, and an LSTM's
with projections.
"""

from __future__ import annotations

import gzip
import json
import sys
from typing import Any

from memfit.trace._conv_probe import ELEMENT, config_key, split_workspaces

# Hopper chips of one engine set: cuDNN picks the same engines on both (12 configurations the
# H200 probed, probed again on an H100, took the same workspaces: results/2026-12-06-h100-zoo-
# convolutions); a table of sm90 takes probes from either
SM90 = ("H100", "H200")


def build(probe: dict[str, Any]) -> dict[str, Any]:
    table: dict[str, dict[str, dict[str, list[int]]]] = {}
    for p in probe["conv"]:
        entry = table.setdefault(config_key(p), {"fwd": {}, "dgrad": {}, "wgrad": {}, "bias": {}})
        found = split_workspaces(p)
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
        "gru_workspace": lstm_workspace_fits(probe, kind="gru"),
        "lstm_proj_workspace": lstm_proj_workspace_fits(probe),
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


def _lstm_workspace(p: dict[str, Any]) -> int:
    """The workspace of one LSTM probe: the allocation before the reserve space in training,
    the call's largest transient in inference (no reserve space)."""
    b, s, h, layers = p["batch"], p["seq"], p["hidden"], p["layers"]
    dirs = 2 if p["bidirectional"] else 1
    if p.get("train", True):
        per_layer = 7 if p.get("kind", "lstm") == "gru" else 6  # a GRU keeps one more per layer
        reserve = (per_layer * layers - 1) * dirs * b * s * h * ELEMENT[p["dtype"]] + 256
        allocs = [size for action, size in p["trace"] if action == "alloc"]
        return allocs[allocs.index(reserve) - 1]
    return max(_transients(p["trace"]))


def _solve(rows: list[list[float]], y: list[float]) -> list[float]:
    """Least squares; + 0.0 writes a zero coefficient 0.0 whatever sign the solver left on it,
    so that the same probes give the same file on any BLAS."""
    import numpy as np

    coef = np.linalg.lstsq(np.array(rows, float), np.array(y, float), rcond=None)[0]
    return [round(float(c), 4) + 0.0 for c in coef]


def _regime(per_h: dict[int, list[float]]) -> dict[str, Any]:
    """One engine's closed form over the hidden sizes it was probed at: the workspace over
    the element size is ``a*H*B*S + (b1*H + b0)*B + (c1*H + c0)*S + g2*H^2 + g1*H + g0``."""
    hs = sorted(per_h)
    a = round(sum(per_h[h][0] / h for h in hs) / len(hs), 4) + 0.0

    def in_h(index: int, powers: tuple[int, ...]) -> list[float]:
        usable = powers[-len(hs) :] if len(hs) < len(powers) else powers
        coef = _solve([[float(h) ** k for k in usable] for h in hs], [per_h[h][index] for h in hs])
        padded = dict(zip(usable, coef, strict=True))
        return [padded.get(k, 0.0) for k in powers]

    return {
        "h": [hs[0], hs[-1]],
        "a": a,
        "b": in_h(1, (1, 0)),
        "c": in_h(2, (1, 0)),
        "g": in_h(3, (2, 1, 0)),
    }


def lstm_workspace_fits(
    probe: dict[str, Any], kind: str = "lstm"
) -> dict[str, list[dict[str, Any]]]:
    """The LSTM (or ``kind="gru"``: GRU) workspace per (dtype, layers, directions[, infer]), as
    regimes of hidden size.

    At each probed hidden size H, the workspace over the element size is exactly
    ``a_H*B*S + b_H*B + c_H*S + g_H`` (H200 and H100 probes, torch 2.11, cuDNN 9.19), and
    ``a_H / H`` is constant over a range of hidden sizes: one engine's. cuDNN changes engine at
    some hidden size (fp32: between 192 and 256, where ``a_H / H`` falls from 22 to 6), so
    consecutive hidden sizes with the same ``a_H / H`` make one regime, fitted in closed form
    (:func:`_regime`). Only probes whose input size is the hidden size are used; the input's
    own term is :mod:`memfit.trace._rnn`'s."""
    points: dict[str, dict[int, list[tuple[int, int, float]]]] = {}
    for p in probe["lstm"]:
        if p.get("kind", "lstm") != kind or p.get("input", p["hidden"]) != p["hidden"]:
            continue
        if p.get("proj"):  # an LSTM with projections: lstm_proj_workspace_fits
            continue
        dirs = 2 if p["bidirectional"] else 1
        key = f"{p['dtype']}|{p['layers']}|{dirs}" + ("" if p.get("train", True) else "|infer")
        y = _lstm_workspace(p) / ELEMENT[p["dtype"]]
        points.setdefault(key, {}).setdefault(p["hidden"], []).append((p["batch"], p["seq"], y))
    fits: dict[str, list[dict[str, Any]]] = {}
    for key, by_h in sorted(points.items()):
        per_h = {
            h: _solve([[b * s, b, s, 1.0] for b, s, _ in rows], [y for *_, y in rows])
            for h, rows in sorted(by_h.items())
        }
        regimes: list[tuple[float, dict[int, list[float]]]] = []
        for h, coef in per_h.items():
            if regimes and abs(regimes[-1][0] - coef[0] / h) < 0.01:
                regimes[-1][1][h] = coef
            else:
                regimes.append((coef[0] / h, {h: coef}))
        fits[key] = [_regime(members) for _, members in regimes]
    return fits


def _proj_workspace(p: dict[str, Any]) -> int:
    """The workspace of one probe of an LSTM with projections: the allocation before its
    reserve space in training (``memfit.trace._rnn.proj_reserve_bytes``), the call's largest
    transient in inference."""
    if not p.get("train", True):
        return max(_transients(p["trace"]))
    dirs = 2 if p["bidirectional"] else 1
    layers, h, proj, e = p["layers"], p["hidden"], p["proj"], ELEMENT[p["dtype"]]
    tokens = p["batch"] * p["seq"]
    reserve = (15 * layers - 2) * max(h, 2 * proj) * dirs * tokens * e // 2 + 256
    allocs = [size for action, size in p["trace"] if action == "alloc"]
    return allocs[allocs.index(reserve) - 1]


def lstm_proj_workspace_fits(probe: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The workspace of LSTMs with projections (``proj_size``) per (dtype, layers,
    directions[, infer]), probed at one sequence length and one projection share of the hidden
    size (H200, torch 2.11, cuDNN 9.19: 64 steps, ``proj_size`` half the hidden size, hidden
    512 and 1024, batches 16 and 64, 1 and 3 layers). Over the element size it is exactly
    ``(u1*H + u0)*B + v2*H^2 + v1*H`` at that length, a form exact on every probe; what it is
    at other lengths and shares is :mod:`memfit.trace._rnn`'s to bound."""
    points: dict[str, list[tuple[int, int, float]]] = {}
    shape: dict[str, tuple[int, float]] = {}
    for p in probe["lstm"]:
        if not p.get("proj") or p.get("input", p["hidden"]) != p["hidden"]:
            continue
        dirs = 2 if p["bidirectional"] else 1
        key = f"{p['dtype']}|{p['layers']}|{dirs}" + ("" if p.get("train", True) else "|infer")
        y = _proj_workspace(p) / ELEMENT[p["dtype"]]
        points.setdefault(key, []).append((p["hidden"], p["batch"], y))
        probed = (p["seq"], p["proj"] / p["hidden"])
        if shape.setdefault(key, probed) != probed:
            raise ValueError(f"{key}: projected LSTMs probed at more than one length or share")
    fits: dict[str, dict[str, Any]] = {}
    for key, rows in sorted(points.items()):
        coef = _solve([[h * b, b, h * h, h] for h, b, _ in rows], [y for *_, y in rows])
        hs = sorted({h for h, _, _ in rows})
        seq, share = shape[key]
        fits[key] = {"h": [hs[0], hs[-1]], "seq": seq, "share": share, "u": coef[:2], "v": coef[2:]}
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


def load(path: str) -> dict[str, Any]:
    """A probe run: ``PATH`` of one run, or ``PATH:RUN`` for the run named RUN of a file that
    holds several by name."""
    path, _, run = path.partition(":")
    with gzip.open(path, "rt") as fh:
        probe: dict[str, Any] = json.load(fh)
    return probe[run] if run else probe


def main() -> int:
    *inputs, output = sys.argv[1:]  # each PATH, or PATH:RUN (see load)
    table = build(merge([load(path) for path in inputs]))
    with open(output, "w") as fh:
        json.dump(table, fh, separators=(",", ":"), sort_keys=True)
        fh.write("\n")
    print(f"{len(table['conv'])} configurations -> {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
