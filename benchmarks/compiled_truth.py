"""What a torch.compile'd training step takes on the GPU, beside the same step in eager mode.

memfit refuses compiled steps unless asked to estimate them as eager (``compiled="eager"``, an
upper bound); this measures how far above the compiled truth that bound is. Each variant runs in
a fresh process: GPT-2 (124M), batch 8 x 1024 tokens, bf16 autocast, AdamW, two steps (the first
compiles), peaks from torch.cuda.

    PYTHONPATH=src python benchmarks/compiled_truth.py --out FILE.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path


def run(compiled: bool) -> dict:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step_model = torch.compile(model) if compiled else model
    ids = torch.randint(0, 50257, (8, 1024), device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return {
        "compiled": compiled,
        "peak_allocated": torch.cuda.max_memory_allocated(),
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", choices=["eager", "compiled"])
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run(args.child == "compiled")), flush=True)
        return 0
    rows = []
    for variant in ("eager", "compiled"):
        proc = subprocess.run(
            [sys.executable, __file__, "--child", variant], capture_output=True, text=True
        )
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        failed = {"variant": variant, "error": proc.stderr[-2000:]}
        rows.append(json.loads(line[7:]) if line else failed)
        print(rows[-1], flush=True)
    meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
