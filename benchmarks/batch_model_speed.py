"""What a batch model saves: another batch size of a traced configuration answered by replaying
the allocator instead of tracing, and whole plans and batch-size searches with and without it.

    PYTHONPATH=src python benchmarks/batch_model_speed.py [--out DIR] [--only PART ...]

Parts:

* ``second``: for each model, the configuration traced at two batch sizes (the samples) and
  a batch model fitted on them; then at each other batch size, the estimate from a trace there
  (``memfit.estimate``'s work: trace, replay) and from the derived trace (derive, replay), the
  two compared event for event (``memfit.trace.same_trace``) and by their peaks. Target: the
  derived estimate of Llama-2-7B bf16-mixed (1 x 4096 tokens estimated first) in at most 0.5 s.
* ``commands``: ``memfit plan`` and ``memfit estimate --max-batch-size`` command lines, each run
  in a fresh process with the batch model off, on, on and off (``--json``): their traces,
  seconds (the command's, the plan's or the search's own, and the process's wall time) and
  answers; ``before`` and ``after`` are each side's faster run.

Writes ``batch_model_speed.json`` (machine, versions, date, command, every measurement) to
``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SECOND = [
    # (model, seq_len, precision, samples, targets)
    ("llama-2-7b-hf", 4096, "bf16-mixed", (2, 3), (4, 8)),
    ("gpt2", 1024, "fp32", (2, 5), (8, 16, 32)),
    ("bert-base-uncased", 512, "fp32", (2, 5), (8, 32, 64)),
    ("tv:resnet50", None, "bf16-mixed", (2, 5), (32, 128, 256)),
]
COMMANDS = [
    "plan llama-2-7b -b 1 -s 4096 -p bf16-mixed --gpu 48GiB",
    "plan gpt2 -b 32 -s 1024 --gpu 24GiB",
    "plan gpt2 -b 256 -s 1024 --gpu 24GiB",
    "estimate bert-base-uncased -s 512 --max-batch-size --gpu 24GiB",
    "estimate tv:resnet50 --max-batch-size --gpu h100",
    "estimate tv:resnet18 --max-batch-size --gpu 24GiB",
]


def second(name: str, seq_len: int | None, precision: str, samples: Any, targets: Any) -> dict:
    """One model's samples, fit and derived estimates against traced ones."""
    from memfit._gpus import resolve_gpu
    from memfit.estimator import estimate_workload, gc_paused, quiet_libraries
    from memfit.trace import BatchModel, Trace, fit_batch_model, same_trace, trace_workload
    from memfit.workload import make_workload

    gpu = resolve_gpu("h100")
    with quiet_libraries(), gc_paused():
        base = make_workload(name, batch_size=1, seq_len=seq_len, precision=precision, gpu=gpu)
        started = time.perf_counter()
        first = estimate_workload(base)  # the configuration as estimated (imports its library)
        out: dict[str, Any] = {
            "model": name,
            "seq_len": seq_len,
            "precision": precision,
            "first_estimate": {"batch": 1, "seconds": round(time.perf_counter() - started, 3)},
            "peak_allocated_at_1": first.peak_allocated,
        }
        traces: dict[int, Any] = {}
        seconds = {}
        for b in samples:
            started = time.perf_counter()
            traces[b] = trace_workload(base.with_batch_size(b), gpu, kernel_calls=True)
            seconds[b] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        model = fit_batch_model(traces)
        out["samples"] = {"batches": list(samples), "trace_seconds": seconds}
        out["fit_seconds"] = round(time.perf_counter() - started, 3)
        if not isinstance(model, BatchModel):
            out["refused"] = model.reason
            return out
        rows = []
        for b in targets:
            workload = base.with_batch_size(b)
            started = time.perf_counter()
            traced = estimate_workload(workload)
            traced_seconds = time.perf_counter() - started
            started = time.perf_counter()
            derived = model.trace_at(b)
            assert isinstance(derived, Trace), derived
            replayed = estimate_workload(workload, trace=derived)
            replayed_seconds = time.perf_counter() - started
            direct = trace_workload(workload, gpu)
            rows.append(
                {
                    "batch": b,
                    "traced_seconds": round(traced_seconds, 3),
                    "replayed_seconds": round(replayed_seconds, 3),
                    "derive_seconds": round(derived.seconds, 3),
                    "same_trace": same_trace(derived, direct) is None,
                    "same_peaks": (replayed.peak_allocated, replayed.peak_reserved)
                    == (traced.peak_allocated, traced.peak_reserved),
                    "peak_allocated": replayed.peak_allocated,
                    "peak_reserved": replayed.peak_reserved,
                    "events": len(derived.events),
                }
            )
        out["targets"] = rows
    return out


def child(command: str, batch_model: bool) -> None:
    """Run one memfit command line here, the batch model on or off; print its result."""
    from memfit.cli import main
    from memfit.trace import _batch_traces

    _batch_traces.BATCH_MODEL = batch_model
    printed = io.StringIO()
    started = time.perf_counter()
    with contextlib.redirect_stdout(printed):
        code = main([*command.split(), "--json"])
    seconds = time.perf_counter() - started
    data = json.loads(printed.getvalue())
    summary: dict[str, Any] = {"exit_code": code, "command_seconds": round(seconds, 2)}
    if command.startswith("plan"):
        chosen = data["chosen"] or data["smallest"]
        summary |= {
            "traces": data["traces"],
            "plan_seconds": round(data["seconds"], 2),
            "candidates": len(data["candidates"]),
            "replayed": sum(1 for c in data["candidates"] if c.get("replayed_from")),
            "fits": data["fits"],
            "answer": {k: chosen[k] for k in chosen if k not in ("replayed_from",)},
            "notes": [n for n in data["notes"] if "replayed" in n or "batch model" in n],
        }
    else:
        summary |= {
            "traces": len(data["traced"]),
            "replayed": len(set(data["replayed"]) - set(data["traced"])),
            "search_seconds": round(data["estimate_seconds"], 2),
            "estimates": len(data["estimates"]),
            "answer": {
                "batch_size": data["batch_size"],
                "predicted_peak_reserved": data["predicted_peak_reserved"],
                "predicted_need": data["predicted_need"],
            },
            "batch_model": data["batch_model"],
        }
    print("RESULT " + json.dumps(summary))


def commands() -> list[dict[str, Any]]:
    """Each command line off, on, on, off (each run a fresh process): the machine's load moves
    from one minute to the next, so each side is timed twice and its faster run kept."""
    rows = []
    for command in COMMANDS:
        row: dict[str, Any] = {"command": f"memfit {command}", "runs": []}
        for on in (False, True, True, False):
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, __file__, "--child", command, *(["--on"] if on else [])],
                capture_output=True,
                text=True,
                check=True,
            )
            wall = time.perf_counter() - started
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            run = {**json.loads(line[len("RESULT ") :]), "process_seconds": round(wall, 2)}
            row["runs"].append({"model_on": on, **run})
            print(row["command"], "on" if on else "off", run, flush=True)
        for label, on in (("before", False), ("after", True)):
            runs = [r for r in row["runs"] if r["model_on"] is on]
            row[label] = min(runs, key=lambda r: r["command_seconds"])
        row["same_answer"] = all(r["answer"] == row["runs"][0]["answer"] for r in row["runs"])
        rows.append(row)
    return rows


def machine() -> dict[str, Any]:
    import torch
    import transformers

    import memfit

    return {
        "cpus": len(os.sched_getaffinity(0)),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "memfit": getattr(memfit, "__version__", ""),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", nargs="*", choices=("second", "commands"))
    parser.add_argument("--child")
    parser.add_argument("--on", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.on)
        return 0
    parts = args.only or ["second", "commands"]
    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "command": " ".join(["benchmarks/batch_model_speed.py", *sys.argv[1:]]),
        "machine": machine(),
    }
    if "second" in parts:
        result["second_batch_size"] = []
        for case in SECOND:
            row = second(*case)
            print(json.dumps(row), flush=True)
            result["second_batch_size"].append(row)
    if "commands" in parts:
        result["commands"] = commands()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "batch_model_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
