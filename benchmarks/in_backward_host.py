"""What stepping the optimizer in backward costs the host per parameter tensor, measured apart
from the GPU (issue 13): the host's seconds of ``loss.backward()`` (the GPU synchronized before,
not after, so the GPU's work is not waited for) with each parameter stepped in backward, less
the same backward with the fused optimizer stepping after it, over the parameter tensors; and
the whole step, synchronized. For the tiny calibration models and real ones.

    PYTHONPATH=src python benchmarks/in_backward_host.py --out FILE.json
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

    from memfit.workload import OptimizerInBackward, optimizer_for, prepare_model

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


def main() -> int:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for name, settings in MODELS:
        after = run(name, settings, "adamw-fused")
        during = run(name, settings, "adamw-in-backward")
        per = (during["host_seconds"] - after["host_seconds"]) / during["tensors"]
        rows.append({"model": name, "after": after, "in_backward": during, "per_tensor": per})
        print(
            f"{name:18s} {during['tensors']:4d} tensors  host {after['host_seconds'] * 1e3:6.2f}"
            f" -> {during['host_seconds'] * 1e3:6.2f} ms ({per * 1e6:6.1f} us/tensor)  "
            f"synchronized {after['synchronized_seconds'] * 1e3:6.2f} -> "
            f"{during['synchronized_seconds'] * 1e3:6.2f} ms",
            flush=True,
        )
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
