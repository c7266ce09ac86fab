"""Per-step peaks of a compiled workload on the GPU, with inductor's generated code: where a
compiled step's memory goes (compile-time benchmarks in step 1, the steady step after).

    PYTHONPATH=src TORCH_LOGS=output_code python benchmarks/compiled_steps.py ID --out FILE.json \
        2> OUTPUT_CODE.txt

``ID`` is a compiled workload of benchmarks/workloads.py (its model file compiles the model);
three steps run, the peaks of each are kept (reset between them).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import ALL


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("id")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--as-memfit",
        action="store_true",
        help="build on the GPU and, in inference, freeze the parameters, as "
        "memfit's measurement does",
    )
    args = parser.parse_args()
    entry = next(w for w in ALL if w["id"] == args.id)
    path, _, fn = entry["model"].partition(":")
    namespace: dict[str, Any] = {}
    exec(compile(Path(path).read_text(), path, "exec"), namespace)
    if args.as_memfit:
        with torch.device("cuda"):
            model = namespace[fn]()
    else:
        model = namespace[fn]().cuda()
    precision = entry.get("precision", "fp32")
    if precision in ("bf16", "fp16"):
        model = model.to(torch.bfloat16 if precision == "bf16" else torch.float16)
    train = entry.get("mode", "train") == "train"
    model.train(train)
    if args.as_memfit and not train:
        for p in model.parameters():
            p.requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters()) if train else None
    amp = {"bf16-mixed": torch.bfloat16, "fp16-mixed": torch.float16}.get(precision)
    rows = []
    for step in range(3):
        batch = {
            k: v.cuda()
            for k, v in namespace["make_batch"](entry["batch_size"], entry.get("seq_len")).items()
        }
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        region = torch.autocast("cuda", dtype=amp) if amp else contextlib.nullcontext()
        if train:
            with region:
                loss = model(**batch).loss
            loss.backward()
            del loss
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            with torch.no_grad(), region:
                out = model(**batch)
            del out
        del batch
        torch.cuda.synchronize()
        rows.append(
            {
                "step": step + 1,
                "peak_allocated": torch.cuda.max_memory_allocated(),
                "peak_reserved": torch.cuda.max_memory_reserved(),
                "allocated_after": torch.cuda.memory_allocated(),
            }
        )
        print(rows[-1], flush=True)
    import transformers

    meta = {
        "date": dt.date.today().isoformat(),
        "id": args.id,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name(),
    }
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
