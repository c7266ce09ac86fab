"""Why DDP with ``gradient_as_bucket_view=True`` peaks a gradients' size above memfit's estimate
on a GPU (H200, 2026-12-02: GPT-2 fp32 4 x 512 on one NCCL rank, 6.126 GB against 5.628). Each
variant runs three steps in a fresh process and prints each step's peak allocated, so that
what removes the gap names its cause:

* ``nccl``: as measured before (the baseline);
* ``nccl-record-streams``: ``TORCH_NCCL_AVOID_RECORD_STREAMS=0``: the collectives' tensors are
  not stashed in the process group's work objects until its watchdog lets them go;
* ``nccl-pause``: a synchronize and a 1 s pause between steps (the watchdog's time to clean up);
* ``fake``: PyTorch's fake process group on the GPU (no NCCL at all);
* ``nccl-no-views``: ``gradient_as_bucket_view=False`` (measured exact before).

    PYTHONPATH=src python benchmarks/ddp_views_probe.py OUT.json [--trace DIR]
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

VARIANTS = {
    "nccl": {},
    "nccl-record-streams": {"TORCH_NCCL_AVOID_RECORD_STREAMS": "0"},
    "nccl-pause": {"PAUSE": "1"},
    "fake": {"GROUP": "fake"},
    "nccl-no-views": {"VIEWS": "0"},
}


def child(trace_dir: str | None) -> dict[str, object]:
    import torch
    import torch.distributed as dist
    import transformers
    from torch.nn.parallel import DistributedDataParallel

    if os.environ.get("GROUP") == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29517")
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).cuda()
    views = os.environ.get("VIEWS", "1") == "1"
    ddp = DistributedDataParallel(model, device_ids=[0], gradient_as_bucket_view=views)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (4, 512), device="cuda")
    if trace_dir:
        torch.cuda.memory._record_memory_history(context="all", stacks="python")
    peaks = []
    for _ in range(3):
        torch.cuda.reset_peak_memory_stats()
        ddp(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        if os.environ.get("PAUSE"):
            time.sleep(1.0)
    if trace_dir:
        import gzip
        import pickle

        snap = torch.cuda.memory._snapshot()
        name = os.environ["VARIANT"]
        with gzip.open(Path(trace_dir) / f"trace-ddp-{name}.pickle.gz", "wb") as fh:
            pickle.dump(snap, fh)
    dist.destroy_process_group()
    return {"peaks": peaks, "torch": torch.__version__}


def main() -> int:
    if sys.argv[1] == "child":
        print("RESULT " + json.dumps(child(os.environ.get("TRACE_DIR"))), flush=True)
        return 0
    out = Path(sys.argv[1])
    trace_dir = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--trace" else None
    rows = []
    for name, env in VARIANTS.items():
        extra = {**env, "VARIANT": name, **({"TRACE_DIR": trace_dir} if trace_dir else {})}
        proc = subprocess.run(
            [sys.executable, __file__, "child"],
            env={**os.environ, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        row = {
            "variant": name,
            **(json.loads(line[7:]) if line else {"error": proc.stderr[-2000:]}),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
