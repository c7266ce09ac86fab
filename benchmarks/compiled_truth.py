"""What a torch.compile'd training step takes on the GPU, beside the same step in eager mode.

Ground truth for the compiled trace: each variant runs in a fresh process, GPT-2
(124M) with AdamW, two steps (the first compiles), peaks from torch.cuda, the allocator's
trace of the second step (``--traces``) and inductor's generated code (``output_code``, the
wrapper whose buffer planning the compiled trace replays) kept beside the results.

    PYTHONPATH=src python benchmarks/compiled_truth.py --out DIR [--traces] [--only NAME...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# name -> (batch, seq_len, autocast dtype or None, compiled)
VARIANTS: dict[str, tuple[int, int, str | None, bool]] = {
    "gpt2-b8-s1024-bf16autocast-eager": (8, 1024, "bfloat16", False),
    "gpt2-b8-s1024-bf16autocast-compiled": (8, 1024, "bfloat16", True),
    "gpt2-b2-s128-fp32-eager": (2, 128, None, False),
    "gpt2-b2-s128-fp32-compiled": (2, 128, None, True),
}


def run(name: str, trace_dir: Path | None) -> dict[str, Any]:
    import contextlib

    import torch
    import transformers

    batch, seq_len, amp, compiled = VARIANTS[name]
    torch.manual_seed(0)
    config = transformers.GPT2Config()
    model = transformers.GPT2LMHeadModel(config).cuda()
    model.loss_type = "ForCausalLM"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step_model = torch.compile(model) if compiled else model
    ids = torch.randint(0, 50257, (batch, seq_len), device="cuda")

    def step() -> None:
        ctx = torch.autocast("cuda", dtype=getattr(torch, amp)) if amp else contextlib.nullcontext()
        with ctx:
            loss = step_model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # compiles; the optimizer's state appears
    torch.cuda.synchronize()
    first = {
        "peak_allocated": torch.cuda.max_memory_allocated(),
        "peak_reserved": torch.cuda.max_memory_reserved(),
    }
    torch.cuda.reset_peak_memory_stats()
    if trace_dir is not None:
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    step()
    torch.cuda.synchronize()
    if trace_dir is not None:
        torch.cuda.memory._dump_snapshot(str(trace_dir / f"{name}.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    return {
        "name": name,
        "batch": batch,
        "seq_len": seq_len,
        "autocast": amp,
        "compiled": compiled,
        "first_step": first,
        "peak_allocated": torch.cuda.max_memory_allocated(),
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True, help="a folder for the results")
    parser.add_argument("--traces", action="store_true")
    parser.add_argument("--only", nargs="*", default=list(VARIANTS))
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        trace_dir = args.out if args.traces else None
        print("RESULT " + json.dumps(run(args.child, trace_dir)), flush=True)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.only:
        env = dict(os.environ, TORCH_LOGS="output_code") if VARIANTS[name][3] else None
        cmd = [sys.executable, __file__, "--child", name, "--out", str(args.out)]
        proc = subprocess.run(
            cmd + (["--traces"] if args.traces else []), capture_output=True, text=True, env=env
        )
        if VARIANTS[name][3]:
            (args.out / f"{name}.output_code.txt").write_text(proc.stderr)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        rows.append(json.loads(line[7:]) if line else {"name": name, "error": proc.stderr[-2000:]})
        print(rows[-1], flush=True)
    meta = {"date": dt.date.today().isoformat(), "command": " ".join(sys.argv)}
    (args.out / "compiled_truth.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
