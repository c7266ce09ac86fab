"""A user's own wrapping (``parallelize=fn(model, mesh)``) estimated, then measured on a GPU.

    PYTHONPATH=src python benchmarks/parallelize_gpu.py predict OUT.json   # on the CPU
    PYTHONPATH=src python benchmarks/parallelize_gpu.py measure OUT.json   # on a GPU

Each case runs in a fresh process on the GPU; a world larger than one runs rank 0 with PyTorch's
fake process group answering the collectives (as ``gpu_measure.py`` does for FSDP2).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn


def _fsdp2_kept(model: nn.Module, mesh: Any) -> nn.Module:
    """Blocks not resharded after forward (their parameters kept gathered until backward)."""
    from torch.distributed.fsdp import fully_shard

    for block in model.transformer.h:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh)
    return model


def _fsdp2_bf16(model: nn.Module, mesh: Any) -> nn.Module:
    """bf16 all-gathers and bf16 reductions (no float32 reduce dtype)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    for block in model.transformer.h:  # type: ignore[union-attr]
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def _ddp_views(model: nn.Module, mesh: Any) -> nn.Module:
    """DDP whose gradients are views of its buckets."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [torch.cuda.current_device()] if mesh.device_type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)


CASES: dict[str, dict[str, Any]] = {
    "fsdp2-4-gpt2-fp32-b4-s512-kept": {
        "strategy": "fsdp2",
        "world_size": 4,
        "parallelize": _fsdp2_kept,
    },
    "fsdp2-4-gpt2-bf16mixed-b8-s1024-bf16reduce": {
        "strategy": "fsdp2",
        "world_size": 4,
        "parallelize": _fsdp2_bf16,
        "precision": "bf16-mixed",
        "batch_size": 8,
        "seq_len": 1024,
    },
    "ddp1-gpt2-fp32-b4-s512-views": {"strategy": "ddp", "world_size": 1, "parallelize": _ddp_views},
}


def _workload(case: str) -> Any:
    from memfit.workload import make_workload

    settings = {"batch_size": 4, "seq_len": 512, **CASES[case]}
    return make_workload("gpt2", gpu="h200", **settings)


def _measure_one(case: str) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from memfit.estimator._measure import measure

    workload = _workload(case)
    if workload.world_size > 1:
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=workload.world_size)
    result, _ = measure(workload)
    return {"id": case, **result.to_dict()}


def main() -> int:
    what, out = sys.argv[1], Path(sys.argv[2])
    if what == "child":
        print("RESULT " + json.dumps(_measure_one(sys.argv[3])), flush=True)
        return 0
    rows = []
    for case in CASES:
        if what == "predict":
            from memfit.estimator._estimate import estimate_workload

            est = estimate_workload(_workload(case))
            row = {
                "id": case,
                "estimate_allocated": est.peak_allocated,
                "estimate_reserved": est.peak_reserved,
            }
        else:
            proc = subprocess.run(
                [sys.executable, __file__, "child", str(out), case], capture_output=True, text=True
            )
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            row = json.loads(line[7:]) if line else {"id": case, "error": proc.stderr[-2000:]}
        print(json.dumps(row)[:300], flush=True)
        rows.append(row)
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
