"""Measure the validation set on a real GPU: peaks, NVML, and the allocator trace of each run.

Each workload runs in its own process (a fresh allocator and fresh cuBLAS handles, like a
user's job). Usage, on a GPU machine, from the repository root:

    PYTHONPATH=src python benchmarks/gpu_measure.py OUT_DIR [--only ID ...] [--traces]
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import ALL, estimate_kwargs, recipe_for


def _strip_frames(snapshot: dict) -> dict:
    for trace in snapshot.get("device_traces", []):
        for entry in trace:
            entry.pop("frames", None)
    for seg in snapshot.get("segments", []):
        for block in seg.get("blocks", []):
            block.pop("frames", None)
    return snapshot


def run_one(entry: dict, out: Path, traces: bool) -> dict:
    from memfit.estimator._measure import measure
    from memfit.workload import make_workload

    recipe = recipe_for(entry)
    workload = make_workload(recipe, **estimate_kwargs(entry))
    zero = str(entry.get("strategy", "")).startswith("zero")  # DeepSpeed wants a group, even of 1
    if entry.get("world_size", 1) > 1 or zero:  # rank 0 of the job, its collectives answered by
        # a fake group (HELD_OUT_FSDP2, _ZERO): what rank 0 allocates, without NCCL or other GPUs
        import torch.distributed as dist
        from torch.testing._internal.distributed.fake_pg import FakeStore

        world = entry.get("world_size", 1)
        if zero:  # what a launcher (torchrun, deepspeed) sets, which DeepSpeed checks
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE=str(world))
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    result, snapshot = measure(workload, record_history=traces)
    row = {"id": entry["id"], "entry": entry, **result.to_dict()}
    if snapshot is not None:
        path = out / f"trace-{entry['id']}.pickle.gz"
        with gzip.open(path, "wb") as fh:
            pickle.dump(_strip_frames(snapshot), fh)
        row["trace_file"] = path.name
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--traces", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        entry = next(w for w in ALL if w["id"] == args.child)
        row = run_one(entry, args.out, args.traces)
        print("RESULT " + json.dumps(row), flush=True)
        return 0
    rows = []
    for entry in ALL:
        if args.only and entry["id"] not in args.only:
            continue
        env = dict(os.environ)
        env["PYTORCH_CUDA_ALLOC_CONF"] = entry.get("allocator_config", "")
        cmd = [sys.executable, __file__, str(args.out), "--child", entry["id"]]
        if args.traces:
            cmd.append("--traces")
        start = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            row = {"id": entry["id"], "entry": entry, "error": proc.stderr[-3000:]}
        else:
            row = json.loads(line[len("RESULT ") :])
        row["wall_seconds"] = round(time.time() - start, 1)
        rows.append(row)
        print(
            f"{entry['id']:45s} "
            + (
                f"alloc {row['peak_allocated'] / 2**30:7.3f} GiB  reserved "
                f"{row['peak_reserved'] / 2**30:7.3f} GiB  ctx {row.get('context')}"
                if "error" not in row
                else "ERROR " + row["error"][-300:]
            ),
            flush=True,
        )
        # written after each workload: a call's time limit keeps what was measured
        meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
        (args.out / "measured.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
