"""The zoo's convolutions that memfit's cuDNN table does not answer, probed on the GPU.

A convolution's workspace depends on the engine cuDNN picks, which only the GPU tells
(``memfit/trace/_cudnn.py``). The table holds the shapes of a few networks at a few batches;
the zoo's convolutional networks use thousands of other shapes, at their own batches. This
lists, for every workload of the zoo sweep of ``--sources`` (torchvision and timm unless
told), each 2-d convolution (a 1-d one as the 2-d one of height 1 that cuDNN runs) whose shape
is not in the table or whose batch it does not hold (interpolated or scaled), as the trace of
the workload meets it, and probes them on the GPU at those batches:

    PYTHONPATH=src python benchmarks/zoo_convs.py list --out convs.json [--models MODELS.json] \
        [--sources transformers ...] [--also ID ...]          # workloads of workloads.py too
    PYTHONPATH=src python benchmarks/zoo_convs.py probe convs.json --out PROBE.json.gz \\
        [--budget-s 300]                                        # on a GPU

``list`` traces each workload on the CPU (the batches of the sweep's ``models.json``) and
writes the configurations largest first (by the larger of input and output bytes: the
workspaces that move a peak), each with the workloads it came from; a few configurations the
table already holds go first, measured again as a check that the GPU at hand picks the
engines the table's GPU did. ``probe`` runs ``cudnn_probe.py``'s probe on each, largest first,
within ``--budget-s`` seconds, and writes the probe document that ``build_cudnn_table.py``
reads (saved as it goes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memfit.trace._conv_probe import (
    io_elements,
    recorded_convolutions,
    table_answers,
)

ROOT = Path(__file__).resolve().parent
MODELS = ROOT / "results" / "2026-12-06-cpu-zoo-sweep" / "models.json"
CHECKS = 12  # configurations the table holds, probed again first


def convolutions_of(job: tuple[dict[str, Any] | str, str, int]) -> list[dict[str, Any]]:
    """The convolutions of a zoo workload (entry, mode, batch), or of a workload of
    ``benchmarks/workloads.py`` (its id, its own mode and batch)."""
    from workloads import ALL, estimate_entry
    from zoo_inputs import workload_for

    import memfit

    entry, mode, batch = job
    with recorded_convolutions() as seen:
        if isinstance(entry, str):
            estimate_entry(next(e for e in ALL if e["id"] == entry))
        else:
            memfit.estimate(workload_for(entry, mode, batch, "h100"))
    return list(seen.values())


def _mode_of(wid: str) -> str:
    from workloads import ALL

    return str(next(e for e in ALL if e["id"] == wid).get("mode", "train"))


def _job(job: tuple[dict[str, Any] | str, str, int]) -> tuple[str, list[dict[str, Any]] | str]:
    entry, mode, _ = job
    wid = entry if isinstance(entry, str) else f"{entry['id']}/{mode}"
    try:
        return wid, convolutions_of(job)
    except Exception as exc:  # a workload memfit refuses: no convolutions to list
        return wid, f"{type(exc).__name__}: {str(exc)[:120]}"


def run_list(models: Path, out: Path, also: list[str], sources: list[str]) -> int:
    import multiprocessing

    document = json.loads(models.read_text())
    found: dict[str, dict[str, Any]] = {}
    checks: dict[str, dict[str, Any]] = {}
    entries = [e for e in document["entries"] if e["source"] in sources]
    jobs: list[tuple[dict[str, Any] | str, str, int]] = [
        (entry, mode, workload["batch_size"])
        for entry in entries
        for mode, workload in entry.get("workloads", {}).items()
    ]
    jobs += [(wid, _mode_of(wid), 0) for wid in also]
    start = time.perf_counter()
    # a fresh worker every few workloads: what the traces leave behind adds up to the
    # machine's memory over a few hundred models
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=8) as pool:
        for n, (wid, convs) in enumerate(pool.imap(_job, jobs), 1):
            if isinstance(convs, str):
                print(f"{wid}: {convs}", file=sys.stderr)
                continue
            train = wid.endswith("/train") or (wid in also and _mode_of(wid) == "train")
            for cfg in convs:
                cfg = {**cfg, "train": train}
                name = json.dumps(cfg, sort_keys=True)
                bucket = checks if table_answers(cfg, train) else found
                bucket.setdefault(name, {**cfg, "workloads": []})["workloads"].append(wid)
            print(f"[{n}/{len(jobs)}, {time.perf_counter() - start:.0f} s] {wid}", flush=True)
    configs = sorted(found.values(), key=io_elements, reverse=True)
    known = sorted(checks.values(), key=io_elements, reverse=True)[:CHECKS]
    for cfg in known:
        cfg["check"] = True
    out.write_text(
        json.dumps(
            {
                "meta": {"date": dt.date.today().isoformat(), "models": str(models)},
                "configs": known + configs,
            },
            indent=0,
        )
        + "\n"
    )
    print(f"{len(configs)} configurations to probe, {len(known)} to check -> {out}")
    return 0


CONV_OPS = [f"nn.functional.conv{kind}{n}d" for kind in ("", "_transpose") for n in (1, 2, 3)]


def op_sweep_convolutions(ops: list[str]) -> list[dict[str, Any]]:
    """The convolutions of the op sweep's cases of ``ops`` (``op_sweep.py``'s samples, traced
    here as its trace side traces them: forward and backward, fp32, bf16 and fp16)."""
    import os
    import tempfile

    import op_sweep

    if os.environ.get("PYTHONHASHSEED") != op_sweep.HASH_SEED:
        raise SystemExit(f"run with PYTHONHASHSEED={op_sweep.HASH_SEED}: the op sweep's samples")
    with tempfile.TemporaryDirectory() as tmp, recorded_convolutions() as seen:
        op_sweep.main(["trace", f"{tmp}/traced.jsonl", "--ops", *ops, "--budget-s", "3600"])
    return list(seen.values())


def run_list_ops(ops: list[str], out: Path) -> int:
    """``list --ops``: the op sweep's convolutions the table does not answer, smallest first
    (they are many and small: every one probed costs the same call)."""
    configs = [
        {**cfg, "workloads": ["op-sweep"]}
        for cfg in op_sweep_convolutions(ops)
        if not table_answers(cfg, cfg["train"])
    ]
    configs.sort(key=io_elements)
    meta = {"date": dt.date.today().isoformat(), "ops": ops}
    out.write_text(json.dumps({"meta": meta, "configs": configs}, indent=0) + "\n")
    print(f"{len(configs)} configurations of the op sweep to probe -> {out}")
    return 0


def run_probe(listing: Path, out: Path, budget_s: float) -> int:
    import torch
    from cudnn_probe import probe_meta

    from memfit.trace._conv_probe import probe_conv

    configs = json.loads(listing.read_text())["configs"]
    document: dict[str, Any] = {
        "meta": probe_meta(),
        "conv": [],
        "lstm": [],
        "failed": [],
    }
    start = saved = time.monotonic()

    def save() -> None:
        with gzip.open(out, "wt") as fh:
            json.dump(document, fh)

    for cfg in configs:
        if time.monotonic() - start > budget_s:
            break
        probe = {k: v for k, v in cfg.items() if k not in ("batch", "dtype", "train", "workloads")}
        try:
            probed = probe_conv(probe, cfg["batch"], cfg["dtype"], cfg["train"])
        except torch.OutOfMemoryError as exc:
            document["failed"].append({**cfg, "error": str(exc).splitlines()[0]})
        else:
            document["conv"].append({**probed, "workloads": cfg["workloads"]})
        torch.cuda.empty_cache()
        if time.monotonic() - saved > 20:
            save()
            saved = time.monotonic()
    save()
    print(f"{len(document['conv'])} of {len(configs)} configurations probed -> {out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list")
    listing.add_argument("--models", type=Path, default=MODELS)
    listing.add_argument("--out", type=Path, required=True)
    listing.add_argument("--also", nargs="*", default=[], help="workloads of workloads.py")
    listing.add_argument("--sources", nargs="*", default=["torchvision", "timm"])
    listing.add_argument(
        "--ops", nargs="*", help=f"the op sweep's cases of these ops instead (all: {CONV_OPS})"
    )
    probe = sub.add_parser("probe")
    probe.add_argument("listing", type=Path)
    probe.add_argument("--out", type=Path, required=True)
    probe.add_argument("--budget-s", type=float, default=300.0)
    args = parser.parse_args()
    if args.command == "list" and args.ops is not None:
        return run_list_ops(args.ops or CONV_OPS, args.out)
    if args.command == "list":
        return run_list(args.models, args.out, args.also, args.sources)
    return run_probe(args.listing, args.out, args.budget_s)


if __name__ == "__main__":
    raise SystemExit(main())
