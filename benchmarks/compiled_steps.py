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
from torch.utils._pytree import tree_map

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workloads import ALL

from memfit.workload import call_model, default_loss


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
    # the model file's own loss and forward (an (images, labels) batch), else memfit's rule
    forward = namespace.get("forward_fn", call_model)
    loss_fn = namespace.get("loss_fn", default_loss)
    rows = []
    for step in range(3):
        made = namespace["make_batch"](entry["batch_size"], entry.get("seq_len"))
        batch = tree_map(lambda v: v.cuda() if isinstance(v, torch.Tensor) else v, made)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        region = torch.autocast("cuda", dtype=amp) if amp else contextlib.nullcontext()
        if train:
            with region:
                loss = loss_fn(model, batch)
            loss.backward()
            del loss
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        else:
            with torch.no_grad(), region:
                out = forward(model, batch)
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
