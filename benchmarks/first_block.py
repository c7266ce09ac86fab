"""Where the first, never-freed allocation of a transformers model on the GPU comes from.

Every transformers workload's allocator trace (``2026-11-30-h200-estimate-accuracy/traces/``)
starts with a block of 4 bytes that is never freed, before the model's first weight; no
torchvision model's does.
It is BERT-large fp16 inference's whole -0.28% reserved error (replaying the real trace without
it gives memfit's figure to the byte), and 512 bytes of every transformers estimate's allocated.
memfit's CPU build of the same model makes no such tensor, so it is CUDA-side. This records the
allocator's history with Python stacks while memfit's measuring code builds each model on the
GPU (``prepare_model``, as ``gpu_measure.py`` does), each in a fresh process, and keeps the
first allocations with their stacks.

    PYTHONPATH=src python benchmarks/first_block.py --out FIRST.json [--only ID ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

IDS = (
    "bert-large-fp16-infer-b64-s512",
    "gpt2-bf16mixed-b16-s1024-fused",
    "resnet50-fp32-b64",  # the control: its trace has no such block
)
_KEPT = 4  # allocations kept from the start, with their stacks


def child(entry_id: str) -> dict[str, Any]:
    import torch
    from workloads import ALL, estimate_kwargs, recipe_for

    from memfit.workload import make_workload, prepare_model

    entry = next(e for e in ALL if e["id"] == entry_id)
    workload = make_workload(recipe_for(entry), **estimate_kwargs(entry))
    torch.cuda.init()
    before = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(context="alloc", stacks="python")
    model = prepare_model(workload, "cuda")
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    weights = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    return {
        "id": entry_id,
        "allocated_before": before,
        "allocated_after": torch.cuda.memory_allocated(),
        "weights_and_buffers": weights,
        "allocs": len(events),
        "first": [_alloc(e, 25) for e in events[:_KEPT]],
        # every allocation under 512 bytes, with its innermost frames
        "small": [_alloc(e, 12) for e in events if e["size"] < 512][:10],
    }


def _alloc(event: dict[str, Any], frames: int) -> dict[str, Any]:
    """An allocation's size and its innermost ``frames`` Python frames."""
    stack = [f"{f['filename']}:{f['line']} {f['name']}" for f in event["frames"][:frames]]
    return {"size": event["size"], "frames": stack}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", default=list(IDS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    rows = []
    for entry_id in args.only:
        done = subprocess.run(
            [sys.executable, __file__, "--out", str(args.out), "--child", entry_id],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            rows.append({"id": entry_id, "error": done.stderr[-3000:]})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1])[:2000], flush=True)
    meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
