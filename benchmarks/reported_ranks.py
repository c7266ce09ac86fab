"""memfit's per-rank estimates beside two-GPU measurements reported for the same steps (CPU only).

    PYTHONPATH=src python benchmarks/reported_ranks.py --out FILE.json

The reported numbers, per rank on 2 H200s (NCCL, torch 2.11): a DDP Llama-1.1B-style bf16 step (b4
s2048, AdamW) at 28.0 GiB allocated on rank 0 and 25.9 GiB on rank 1; DDP BERT-base fp32 b32 s512
at 16.8 GiB on each rank; FSDP2 taking the Llama step to 21.2 GiB allocated / 23.9 GiB reserved.
Those numbers were reported, not measured by memfit; this script estimates the same steps
(TinyLlama-1.1B's config for the Llama-style model) and writes both, with the size of each
model's gradients: DDP's first-step buckets, which the trace holds through the second step and
NCCL's watchdog may already have let go (``docs/estimate.md``, "Settings in detail").
Run it with the GPU host's versions (torch 2.11, transformers 5.17) to compare like with like.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
from pathlib import Path
from typing import Any

GIB = 2**30
# (workload, the reported GiB per rank: allocated by rank, reserved where it gives one)
CASES: list[dict[str, Any]] = [
    {
        "name": "DDP TinyLlama-1.1B bf16 4 x 2048",
        "options": {
            "model": "tinyllama-1.1b",
            "batch_size": 4,
            "seq_len": 2048,
            "precision": "bf16",
            "strategy": "ddp",
        },
        "reported_allocated": {"0": 28.0, "1": 25.9},
    },
    {
        "name": "DDP BERT-base fp32 32 x 512",
        "options": {
            "model": "bert-base-uncased",
            "batch_size": 32,
            "seq_len": 512,
            "precision": "fp32",
            "strategy": "ddp",
        },
        "reported_allocated": {"0": 16.8, "1": 16.8},
    },
    {
        "name": "FSDP2 TinyLlama-1.1B bf16 4 x 2048",
        "options": {
            "model": "tinyllama-1.1b",
            "batch_size": 4,
            "seq_len": 2048,
            "precision": "bf16",
            "strategy": "fsdp2",
        },
        "reported_allocated": {"0": 21.2},
        "reported_reserved": {"0": 23.9},
    },
]


def estimate_case(case: dict[str, Any]) -> dict[str, Any]:
    import memfit

    options = dict(case["options"])
    model = options.pop("model")
    est = memfit.estimate(model, gpu="h200", optimizer="adamw", world_size=2, **options)
    # every parameter is trained, in the step's parameter dtype: 2 bytes in bf16, 4 in fp32
    gradients = est.workload.parameters * (2 if options["precision"] == "bf16" else 4)
    return {
        **case,
        "estimate": {
            str(r.rank): {"allocated": r.peak_allocated, "reserved": r.peak_reserved}
            for r in est.ranks
        },
        "gradient_bytes": gradients,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch
    import transformers

    rows = [estimate_case(c) for c in CASES]
    for row in rows:
        for rank, reported in row["reported_allocated"].items():
            got = row["estimate"][rank]["allocated"] / GIB
            print(
                f"{row['name']:38s} rank {rank}: estimate {got:.3f} GiB allocated, "
                f"reported {reported} (minus gradients {got - row['gradient_bytes'] / GIB:.3f})"
            )
        for rank, reported in row.get("reported_reserved", {}).items():
            got = row["estimate"][rank]["reserved"] / GIB
            print(
                f"{row['name']:38s} rank {rank}: estimate {got:.3f} GiB reserved, "
                f"reported {reported}"
            )
    meta = {
        "date": dt.date.today().isoformat(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": "CPU only (estimates); the reported numbers: 2 x H200, NCCL, torch 2.11",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
