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
vision-language types' and the fourth hand-written set's). Per configuration and
phase: the forward's workspaces, the input gradient's, the weight gradient's, and the bias
gradient's reduction's.
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
