"""BERT-base training (batch 32 x 512 tokens, float32, AdamW): where its memory goes, what
activation checkpointing saves, and what ``memfit.plan`` picks for a 12 GiB GPU.

    python examples/bert_memory.py            # on a CPU: the estimates and the plan
    python examples/bert_memory.py --measure  # on a CUDA GPU: the measured peaks beside them

The estimates and the plan run on the CPU in about a minute. With ``--measure`` each step is
also run on the GPU (memfit's own step loop, two steps) and its peaks printed beside the
estimate; the README shows both, from an H200.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import memfit
from memfit.estimator import measure
from memfit.workload import make_workload

MODEL = "bert-base-uncased"
BATCH = {"batch_size": 32, "seq_len": 512}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", action="store_true", help="run the steps on the GPU too")
    parser.add_argument("--budget", default="12GiB", help="the GPU memory to plan for")
    args = parser.parse_args()

    print(f"{MODEL}, {BATCH['batch_size']} x {BATCH['seq_len']} tokens, fp32, AdamW\n")
    print(f"{'':26s} {'estimated (peak allocated / reserved)':>40s}", end="")
    print(f" {'measured':>22s}" if args.measure else "")
    for label, checkpointing in [("as is", False), ("activation checkpointing", True)]:
        workload = make_workload(MODEL, activation_checkpointing=checkpointing, gpu="h200", **BATCH)
        estimate = memfit.estimate(workload)
        line = f"{label:26s} {_pair(estimate.peak_allocated, estimate.peak_reserved):>40s}"
        if args.measure:
            measured, _ = measure(dataclasses.replace(workload, steps=2))
            line += f" {_pair(measured.peak_allocated, measured.peak_reserved):>22s}"
        print(line)

    started = time.perf_counter()
    plan = memfit.plan(MODEL, budget=args.budget, global_batch=BATCH["batch_size"], **BATCH)
    print(f"\nmemfit.plan for {args.budget} ({time.perf_counter() - started:.0f} s on this CPU):")
    print(f"  {plan}")
    if plan.chosen is not None:
        for change in plan.chosen.changes:
            print(f"  - {change}")
    return 0


def _pair(allocated: int, reserved: int) -> str:
    return f"{memfit.format_bytes(allocated)} / {memfit.format_bytes(reserved)}"


if __name__ == "__main__":
    raise SystemExit(main())
