"""The attention calls real models make, and the kernel torch picks for each, on this GPU.

``sdpa_probe.py`` asks torch about a grid of synthetic calls; this runs the validation set's
models (at a small batch, two real steps on the GPU as ``memfit validate`` runs them) and
records every ``scaled_dot_product_attention`` call they make: shapes, strides, dtypes, the
mask, dropout, causal flag and grad mode, with the backend torch picks for exactly that call
(``torch._fused_sdp_choice``) beside memfit's prediction. Calls are listed once per distinct
signature.

Usage, on a GPU machine, from the repository root:

    PYTHONPATH=src python benchmarks/sdpa_calls.py --out $OUT/sdpa_calls.json [--only ID ...]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdpa_probe import torch_choice
from workloads import HELD_OUT, WORKLOADS, estimate_kwargs, recipe_for

# models that call SDPA; big ones at batch 1 and a shorter sequence where their call shapes
# do not depend on the length
SMALL = {"batch_size": 2}


def _describe(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    return {
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "dtype": str(t.dtype).replace("torch.", ""),
        "requires_grad": t.requires_grad,
    }


class SdpaSpy(TorchFunctionMode):
    """Records each SDPA call with torch's choice and memfit's prediction."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, dict[str, Any]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self._record(args, kwargs)
        return func(*args, **kwargs)

    def _record(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        from memfit.trace._sdpa import choose_backend

        names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"]
        call = dict(zip(names, args, strict=False))
        call.update(kwargs)
        q, k, v = call["query"], call["key"], call["value"]
        mask = call.get("attn_mask")
        dropout = float(call.get("dropout_p", 0.0))
        causal = bool(call.get("is_causal", False))
        gqa = bool(call.get("enable_gqa", False))
        choice = torch_choice(q, k, v, mask, dropout, causal, call.get("scale"), gqa)
        sm = torch.cuda.get_device_capability()
        predicted = choose_backend(q, k, v, mask, sm[0] * 10 + sm[1], gqa)
        row = {
            "q": _describe(q),
            "k": _describe(k),
            "v": _describe(v),
            "mask": _describe(mask),
            "dropout_p": dropout,
            "is_causal": causal,
            "scale": call.get("scale"),
            "enable_gqa": gqa,
            "grad_enabled": torch.is_grad_enabled(),
            "torch": choice,
            "memfit": predicted,
        }
        key = json.dumps(row, sort_keys=True)
        if key in self.calls:
            self.calls[key]["count"] += 1
        else:
            self.calls[key] = {**row, "count": 1}


def run(entry: dict[str, Any]) -> dict[str, Any]:
    from memfit.estimator._measure import measure
    from memfit.workload import make_workload

    kwargs = {**estimate_kwargs(entry), **SMALL}
    if "7b" in entry["id"]:
        kwargs["batch_size"] = 1
    recipe = recipe_for(entry)
    work = make_workload(recipe, **kwargs)
    spy = SdpaSpy()
    start = time.perf_counter()
    with spy:
        measure(work)
    torch.cuda.empty_cache()
    return {
        "kwargs": kwargs,
        "seconds": round(time.perf_counter() - start, 1),
        "calls": list(spy.calls.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    import transformers

    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "workloads": {},
    }
    for entry in WORKLOADS + HELD_OUT:
        if args.only and entry["id"] not in args.only:
            continue
        try:
            result = run(entry)
        except Exception as exc:  # one model's failure must not cost the others
            result = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        report["workloads"][entry["id"]] = result
        calls = result.get("calls", [])
        print(
            entry["id"],
            result.get("error") or [(c["torch"], c["memfit"], c["count"]) for c in calls],
            flush=True,
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
