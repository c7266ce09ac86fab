"""Why a plan applied with ``memfit.apply`` ran slower than memfit's own loop on the same
configuration (H200, 2026-12-02: GPT-2-large 84.8 ms against 63.4 ms): the same step timed four ways
in one process, synchronized around each step, the median of steps 3 on.

    PYTHONPATH=src python benchmarks/apply_gap.py [--out FILE.json]

1. memfit's loop model (``prepare_model``), a hand-written step: forward, backward, step;
2. the model built as a user would and applied, the same hand-written step (no guard);
3. the applied model through ``PlannedStep`` (its ``AutoMicrobatch`` guard);
4. memfit's loop model through a ``PlannedStep`` of its own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

MODEL, SETTINGS = (
    "gpt2-large",
    {"batch_size": 4, "seq_len": 512, "precision": "bf16", "activation_checkpointing": 0.14},
)


def timed(fn: Any, batch: Any, steps: int = 10) -> float:
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(batch)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def by_hand(model: Any, opt: Any, loss_fn: Any) -> Any:
    def step(batch: Any) -> None:
        loss_fn(model, batch).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def main() -> int:
    import memfit
    from memfit.planner import Candidate, Evaluated, Plan, model_key
    from memfit.workload import make_optimizer, make_workload, prepare_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    w = make_workload(MODEL, gpu="h200", optimizer="adamw-fused", **SETTINGS)
    batch = {k: v.cuda() for k, v in w.make_batch().items()}
    out: dict[str, float] = {}
    loop_model = prepare_model(w, "cuda")
    loop_opt = make_optimizer("adamw-fused", list(loop_model.parameters()))
    out["loop model, by hand"] = timed(by_hand(loop_model, loop_opt, w.loss_fn), batch)
    c = Candidate(4, 1, "bf16", 0.14, "adamw-fused", "")
    e = Evaluated(c, 1, 1, 1, 0.1, 1.0, None, "gpu", True, ())

    def plan_for(model: Any) -> Plan:
        return Plan("p", model_key(model), 2**34, 2**33, 0.05, 4, 512, e, [e], e)

    plain = make_workload(MODEL, gpu="h200", batch_size=4, seq_len=512)
    with torch.device("cuda"):
        model = plain.build_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = memfit.apply(model, opt, plan_for(model), loss_fn=plain.loss_fn)
    out["applied model, by hand"] = timed(by_hand(model, opt, plain.loss_fn), batch)
    out["applied model, PlannedStep"] = timed(step, batch)
    memfit.unapply(model, opt)
    del step, model, opt
    for p in loop_model.parameters():
        p.grad = None
    loop_opt2 = torch.optim.AdamW(loop_model.parameters(), lr=1e-4)
    try:  # its blocks are wrapped already: apply may refuse
        loop_step = memfit.apply(loop_model, loop_opt2, plan_for(loop_model), loss_fn=w.loss_fn)
        out["loop model, PlannedStep"] = timed(loop_step, batch)
    except Exception as exc:
        print(f"loop model, PlannedStep: {type(exc).__name__}: {exc}"[:300])
    for k, v in out.items():
        print(f"{k:30s} {v * 1e3:7.1f} ms", flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
