"""What an optimizer variant costs the host per parameter tensor, measured apart from the GPU:
the host's seconds of ``loss.backward()`` and ``optimizer.step()`` (the GPU
synchronized before, not after, so its work is not waited for) with AdamW stepped in backward
(``adamw-in-backward``) and with bitsandbytes' 8-bit states (``adamw-8bit``, when installed),
less the same with the fused AdamW, over the parameter tensors; and the whole, synchronized.
For the tiny calibration models and real ones. ``calibration_fit.py --optimizer-host FILE``
turns it into ``optimizer_param:<variant>``.

    PYTHONPATH=src python benchmarks/optimizer_host.py --out FILE.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODELS: list[tuple[str, dict[str, Any]]] = [
    ("gpt2-tiny", {}),
    ("bert-tiny", {}),
    ("resnet18-tiny", {}),
    ("bert-base-uncased", {"batch_size": 8, "seq_len": 128}),
    ("gpt2", {"batch_size": 4, "seq_len": 128}),
]


def workload(name: str, settings: dict[str, Any], optimizer: str) -> Any:
    from calibrate_gpu import tiny_workload

    from memfit.workload import make_workload

    common = {"precision": "bf16-mixed", "optimizer": optimizer}
    if name.endswith("-tiny"):
        return dataclasses.replace(tiny_workload(name, 3), **common)  # type: ignore[arg-type]
    return make_workload(name, gpu="h200", **settings, **common)


def run(name: str, settings: dict[str, Any], optimizer: str, steps: int = 20) -> dict[str, Any]:
    import torch
    from torch.utils._pytree import tree_map

    from memfit.technique.in_backward import OptimizerInBackward
    from memfit.workload import optimizer_for, prepare_model

    w = workload(name, settings, optimizer)
    net = prepare_model(w, "cuda")
    opt = optimizer_for(w, net)
    stepper = OptimizerInBackward(opt) if w.optimizer_in_backward else None
    host, whole = [], []
    for i in range(steps):
        batch = tree_map(lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, w.make_batch())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = w.loss_fn(net, batch)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss.backward()
        if stepper is None:
            opt.step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if i >= 5:
            host.append(t1 - t0)
            whole.append(t2 - t0)
    tensors = sum(p.requires_grad for p in {id(p): p for p in net.parameters()}.values())
    return {
        "host_seconds": statistics.median(host),
        "synchronized_seconds": statistics.median(whole),
        "tensors": tensors,
    }


VARIANTS = ("adamw-fused", "adamw-in-backward", "adamw-8bit")


def main() -> int:
    import torch

    from memfit.technique.eight_bit import eight_bit_available

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    variants = [v for v in VARIANTS if eight_bit_available() or not v.endswith("8bit")]
    rows = []
    for name, settings in MODELS:
        runs = {v: run(name, settings, v) for v in variants}
        fused = runs["adamw-fused"]
        row: dict[str, Any] = {"model": name, "tensors": fused["tensors"], "runs": runs}
        shown = []
        for v in variants[1:]:
            per = (runs[v]["host_seconds"] - fused["host_seconds"]) / fused["tensors"]
            row[f"per_tensor:{v}"] = per
            shown.append(f"{v} {per * 1e6:6.1f} us/tensor")
        rows.append(row)
        print(f"{name:18s} {fused['tensors']:4d} tensors  " + "  ".join(shown), flush=True)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
