"""Whether copying step 1 for later steps (``trace._repeat``) changes any trace, and what it saves.

    PYTHONPATH=src python benchmarks/repeat_identity.py [--only ID ...] [--out FILE]

For every workload of ``workloads.ALL`` but the compiled ones (whose steps are always traced),
the trace is made twice in one process, with every step traced and with later steps copied, and
the two are compared: every event (blocks renumbered in order of appearance), every allocation's
description, the phases, the notes. Prints, per workload, whether they are the same, how many
steps were copied (or why they were not) and both trace times (the second run of a shape is
faster: its meta kernels are cached, so the traced-every-step run goes first).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def normalized(trace: Any) -> dict[str, Any]:
    """The trace with block numbers replaced by their order of first appearance."""
    order: dict[int, int] = {}
    events = []
    for e in trace.events:
        n = order.setdefault(e.block, len(order))
        info = trace.infos[e.info] if e.info is not None else None
        described = (
            None
            if info is None
            else (info.category.value, info.op, info.module, info.phase, info.shape, info.dtype)
        )
        events.append((e.kind, n, e.size, e.stream, described))
    return {
        "events": events,
        "phases": trace.phases,
        "steps_start": trace.steps_start,
        "parameters": trace.parameters,
        "notes": trace.notes,
    }


def check(entry: dict[str, Any]) -> dict[str, Any]:
    from workloads import estimate_kwargs, recipe_for

    from memfit._gpus import resolve_gpu
    from memfit.trace import _tracer
    from memfit.workload import make_workload

    workload = make_workload(
        recipe_for(entry),
        allocator_config=entry.get("allocator_config", ""),
        gpu=resolve_gpu("h200"),
        **estimate_kwargs(entry),
    )
    runs = {}
    for repeat in (False, True):
        _tracer.REPEAT_STEPS = repeat
        start = time.perf_counter()
        trace = _tracer.trace_workload(workload, resolve_gpu("h200"))
        runs[repeat] = (trace, time.perf_counter() - start)
    _tracer.REPEAT_STEPS = True
    (every, every_s), (copied, copied_s) = runs[False], runs[True]
    a, b = normalized(every), normalized(copied)
    differ = [k for k in a if a[k] != b[k]]
    first = None
    if "events" in differ:
        first = next(
            (i for i, (x, y) in enumerate(zip(a["events"], b["events"], strict=False)) if x != y),
            min(len(a["events"]), len(b["events"])),
        )
    return {
        "id": entry["id"],
        "same": not differ,
        "differ": differ,
        "first_differing_event": first,
        "events": len(every.events),
        "copied_steps": copied.copied_steps,
        "traced_again": copied.traced_again,
        "seconds_every_step_traced": round(every_s, 2),
        "seconds_copied": round(copied_s, 2),
    }


def main() -> int:
    from workloads import ALL, COMPILED_DEV, HELD_OUT_COMPILED, HELD_OUT_COMPILED_FAMILIES

    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    compiled = {e["id"] for e in HELD_OUT_COMPILED + HELD_OUT_COMPILED_FAMILIES + COMPILED_DEV}
    rows = []
    for entry in ALL:
        if entry["id"] in compiled or (args.only and entry["id"] not in args.only):
            continue
        row = check(entry)
        rows.append(row)
        why = f"copied {row['copied_steps']}" if row["copied_steps"] else row["traced_again"]
        print(
            f"{row['id']:48s} {'same' if row['same'] else 'DIFFER ' + str(row['differ']):8s} "
            f"{why}  {row['seconds_every_step_traced']:.1f} s -> {row['seconds_copied']:.1f} s",
            flush=True,
        )
    if args.out:
        import torch

        meta = {
            "date": dt.date.today().isoformat(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "command": " ".join(sys.argv),
        }
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
