"""Record small real snapshots on a CUDA GPU, with stack frames, for the snapshot tests.

Run by hand on a machine with a CUDA GPU (pytest does not collect it)::

    python tests/snapshot/record_on_gpu.py OUT_DIR

Writes ``OUT_DIR/<case>.pickle.gz`` (``torch.cuda.memory._snapshot()`` after a few training
steps of a small MLP) and ``OUT_DIR/stats.json`` (torch's peak statistics for each case):

* ``python``: ``_record_memory_history(stacks='python')``, default settings;
* ``all``: ``stacks='all'`` (C++ frames too), ``expandable_segments:True``.

Recording starts after the model is built, so both traces start mid-run (the weights were
allocated before). A wrapped ring buffer (``max_entries``) keeps the newest entries, which the
tests reproduce by cutting the front off these traces.

Each case runs in a fresh process so that the allocator settings and statistics are its own.
Only torch and the standard library are needed.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

CASES = {
    "python": ("", {"stacks": "python"}),
    "all": ("expandable_segments:True", {"stacks": "all"}),
}


def run_case(name: str, out: Path) -> dict[str, int]:
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters())
    torch.cuda.memory._record_memory_history(**CASES[name][1])  # type: ignore[arg-type]
    for step in range(4):
        x = torch.randn(64 * (step + 1), 1024, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 1:
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with gzip.open(out / f"{name}.pickle.gz", "wb") as fh:
        pickle.dump(snapshot, fh)
    return {
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "memory_allocated": torch.cuda.memory_allocated(),
        "memory_reserved": torch.cuda.memory_reserved(),
        "total_memory": torch.cuda.get_device_properties(0).total_memory,
    }


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] in CASES:
        print("RESULT " + json.dumps(run_case(sys.argv[1], Path(sys.argv[2]))))
        return 0
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for name, (conf, _) in CASES.items():
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": conf}
        proc = subprocess.run(
            [sys.executable, __file__, name, str(out)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
        stats[name] = {"conf": conf, **json.loads(line[len("RESULT ") :])}
    import torch

    meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    (out / "stats.json").write_text(json.dumps({"meta": meta, "cases": stats}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
