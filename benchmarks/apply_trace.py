"""The allocator's trace of a step run through ``memfit.apply`` with the caller's batch on the
GPU, for ``align.py`` (such a step once peaked above memfit's own loop).

    PYTHONPATH=src python benchmarks/apply_trace.py OUT.pickle.gz [--steps 3]

ResNet-50, 128 images as 64 x 2, bf16-mixed, every block checkpointed and its inputs
offloaded, fused AdamW (``workloads.py``'s ``resnet50-bf16mixed-b64x2-ckpt-offloadckpt-held``):
the model built on the GPU, the plan applied, the batch moved to the GPU once and given to each
step. The history is recorded without Python stacks (``context=None``: with them, torch 2.11's
recorder breaks a checkpointed backward). Prints the peaks.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
from pathlib import Path

import torch

import memfit
from memfit.planner import Candidate, Evaluated, Plan, model_key
from memfit.workload import make_workload


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    w = make_workload("tv:resnet50", batch_size=128)
    with torch.device("cuda"):
        model = w.build_model()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    c = Candidate(64, 2, "bf16-mixed", True, "adamw-fused", offload_checkpoints=True)
    e = Evaluated(c, 0, 0, 0, 0.1, 1.0, None, "gpu", True, ())
    plan = Plan("tv:resnet50", model_key(model), 2**36, 2**36, 0.0, 128, None, e, [e], e)
    step = memfit.apply(model, optimizer, plan, loss_fn=w.loss_fn)
    torch.cuda.memory._record_memory_history(context=None, stacks="python", max_entries=2_000_000)
    batch = tuple(t.cuda() for t in w.make_batch())
    torch.cuda.reset_peak_memory_stats()
    for _ in range(args.steps):
        step(batch)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(args.out, "wb") as f:
        pickle.dump(snapshot, f)
    peaks = [torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()]
    print(json.dumps({"peak_allocated": peaks[0], "peak_reserved": peaks[1]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
