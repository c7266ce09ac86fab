"""Serving capacity, predicted on the CPU and checked on the GPU: the largest concurrency
``memfit.serving_capacity`` finds runs, and one more sequence runs out of memory (or comes
within 2% of the GPU).

    PYTHONPATH=src python benchmarks/serving.py predict --gpu h100 --out predictions.json
    PYTHONPATH=src python benchmarks/serving.py measure predictions.json --out measured.json

``predict --quantize nf4`` asks with the linear layers' weights quantized by bitsandbytes
(``memfit serve --quantize``), and ``measure`` quantizes them as memfit does on the GPU.
``measure`` runs each prediction's generate call at its concurrency and at one more, each in a
fresh process, on the whole GPU (its memory is the budget). On a larger GPU than the one
predicted for (an H200 for an H100), the caching allocator is held to what the prediction
leaves PyTorch of the smaller one (its memory less what it put outside PyTorch) by
``torch.cuda.set_per_process_memory_fraction``, and the rows say so (``capped_at``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# (model, context, new tokens): three models, two contexts each
CASES = [
    ("tinyllama-1.1b", 1024, 32),
    ("tinyllama-1.1b", 2048, 32),
    ("qwen2.5-0.5b", 2048, 32),
    ("qwen2.5-0.5b", 4096, 32),
    ("gpt2-medium", 512, 32),
    ("gpt2-medium", 1024, 32),
]


def predict(
    gpu: str, out: Path, models: list[str] | None = None, quantize: str | None = None
) -> None:
    from memfit.estimator import installed_versions, serving_capacity

    rows = []
    for model, context, new in CASES:
        if models and model not in models:
            continue
        start = time.time()
        r = serving_capacity(model, gpu=gpu, context=context, new_tokens=new, quantize=quantize)
        rows.append({"model": model, "context": context, "new_tokens": new, **r.to_dict()})
        print(f"{model:16s} {context:6d} -> {r.concurrency:5d} ({time.time() - start:.0f} s)")
        meta = {
            "gpu": gpu,
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "versions": installed_versions().to_dict(),
            "command": " ".join(sys.argv),
        }
        out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def run_one(
    model: str,
    context: int,
    new: int,
    concurrency: int,
    quantize: str | None = None,
    cap: int = 0,
) -> dict[str, Any]:
    """One generate call on the GPU, as memfit traced it; its peaks or the OOM. ``cap``: the
    most the caching allocator may reserve, where the GPU has more (0: the whole GPU)."""
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    capped = 0 < cap < total
    if capped:
        torch.cuda.set_per_process_memory_fraction(cap / total)

    from memfit.estimator._serving import _generate
    from memfit.workload import resolve_model

    recipe = resolve_model(model)
    with torch.device("cuda"):
        net = recipe.build().to(torch.bfloat16).eval()
        if quantize:  # as memfit's trace quantizes them: where they lie
            from memfit.technique.quantize._replace import quantized

            net = quantized(net, quantize, "bf16")
    assert recipe.make_batch is not None
    batch = recipe.make_batch(concurrency, context - new)
    batch = {k: v.cuda() for k, v in batch.items()}
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    try:
        with torch.inference_mode():
            _generate(new, "dynamic")(net, batch)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        found: dict[str, Any] = {"oom": True, "peak_reserved": torch.cuda.max_memory_reserved()}
    else:
        found = {
            "oom": False,
            "peak_allocated": torch.cuda.max_memory_allocated(),
            "peak_reserved": torch.cuda.max_memory_reserved(),
        }
    found["total"] = total
    if capped:
        found["capped_at"] = cap
    return found


def measure(predictions: Path, out: Path) -> None:
    data = json.loads(predictions.read_text())
    rows = []
    for row in data["rows"]:
        for n in (row["concurrency"], row["concurrency"] + 1):
            args = [row["model"], str(row["context"]), str(row["new_tokens"]), str(n)]
            if row.get("quantize"):
                args += ["--quantize", row["quantize"]]
            args += ["--cap", str(row["gpu"]["memory"] - row["outside_pytorch"])]
            proc = subprocess.run(
                [sys.executable, __file__, "child", *args], capture_output=True, text=True
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            result = json.loads(line[7:]) if line else {"error": proc.stderr[-2000:]}
            rows.append({"model": row["model"], "context": row["context"], "n": n, **result})
            print(json.dumps(rows[-1])[:200], flush=True)
            out.write_text(json.dumps({"predictions": str(predictions), "rows": rows}, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("predict")
    p.add_argument("--gpu", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--models", nargs="+", help="of the cases, only these models")
    p.add_argument("--quantize", choices=("nf4", "fp4", "int8"), help="the weights quantized")
    m = sub.add_parser("measure")
    m.add_argument("predictions", type=Path)
    m.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("child")
    c.add_argument("model")
    c.add_argument("context", type=int)
    c.add_argument("new", type=int)
    c.add_argument("concurrency", type=int)
    c.add_argument("--quantize", default=None)
    c.add_argument("--cap", type=int, default=0, help="the most the allocator may reserve")
    args = parser.parse_args()
    if args.what == "predict":
        predict(args.gpu, args.out, args.models, args.quantize)
    elif args.what == "measure":
        measure(args.predictions, args.out)
    else:
        found = run_one(
            args.model, args.context, args.new, args.concurrency, args.quantize, args.cap
        )
        print("RESULT " + json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
