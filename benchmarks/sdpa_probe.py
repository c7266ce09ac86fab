"""Which attention kernel ``scaled_dot_product_attention`` picks on this GPU, and what it
allocates: the ground truth for ``memfit.trace._sdpa.choose_backend``.

For a grid of shapes, dtypes, masks, causal flags and gradient settings it asks torch which
backend it would run (``torch._fused_sdp_choice``, the function SDPA itself calls) and writes
it beside memfit's prediction for the same call. For a few calls taken from the validation
set (Llama-2-7B and Mistral-7B inference, TinyLlama training, T5's learned bias) it also runs
SDPA with the allocator's history recorded and lists every allocation the call made.

Usage, on a GPU machine, from the repository root:

    PYTHONPATH=src python benchmarks/sdpa_probe.py --out $OUT/sdpa_probe.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend

from memfit.trace._sdpa import choose_backend

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
HEAD_DIMS = [64, 80, 96, 128, 256]
HEADS = [(12, 12), (32, 32), (32, 8)]  # (query heads, key/value heads)
SIZES = [(8, 2048), (2, 4096), (32, 512), (4, 1)]  # (batch, sequence)
MASKS = ["none", "bool", "float", "float-grad"]
TORCH_NAMES = {
    "cudnn": "CUDNN_ATTENTION",
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "math": "MATH",
}
# calls whose allocations are listed: name -> (batch, q heads, kv heads, seq, head dim,
# dtype, causal, mask, requires grad[, dropout])
CALLS: dict[str, tuple[Any, ...]] = {
    "llama-2-7b-infer-b8-s2048": (8, 32, 32, 2048, 128, "bf16", True, "none", False),
    "mistral-7b-infer-b2-s4096": (2, 32, 8, 4096, 128, "bf16", True, "none", False),
    "mistral-7b-infer-b2-s4096-mask": (2, 32, 8, 4096, 128, "bf16", False, "float", False),
    "tinyllama-train-b4-s2048": (4, 32, 4, 2048, 64, "bf16", True, "none", True),
    "t5-small-bias-b32-s512": (32, 8, 8, 512, 64, "fp32", False, "float-grad", True),
    "bert-base-fp32-b32-s512": (32, 12, 12, 512, 64, "fp32", False, "none", True),
    "bert-base-fp32-infer-b32-s512": (32, 12, 12, 512, 64, "fp32", False, "none", False),
    # T5's learned position bias as transformers 5.24 passes it: (1, heads, q, k), contiguous
    "t5-small-bias-5.24-b32-s512": (32, 8, 8, 512, 64, "fp32", False, "bias", True, 0.1),
    "t5-base-bias-5.24-bf16-b16-s512": (16, 12, 12, 512, 64, "bf16", False, "bias32", True, 0.1),
    # as transformers 5.17 passes it: strides (heads, 1, heads * q, heads)
    "t5-small-bias-5.17-b32-s512": (32, 8, 8, 512, 64, "fp32", False, "bias-t", True, 0.1),
}


def torch_choice(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    dropout: float = 0.0,
    causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool | None = None,
) -> str:
    """The backend SDPA would run for this call (``torch._fused_sdp_choice``), or the error
    torch gives; ``enable_gqa`` defaults to whether the key has fewer heads."""
    gqa = q.shape[1] != k.shape[1] if enable_gqa is None else enable_gqa
    try:
        choice = torch._fused_sdp_choice(
            q, k, v, mask, dropout, causal, scale=scale, enable_gqa=gqa
        )
    except RuntimeError as exc:
        return "error: " + str(exc).splitlines()[0][:200]
    return SDPBackend(choice).name


def _mask(
    kind: str,
    batch: int,
    seq: int,
    dtype: torch.dtype,
    kv_seq: int | None = None,
    heads: int = 1,
) -> torch.Tensor | None:
    kv = kv_seq or seq
    if kind == "none":
        return None
    if kind.startswith("bias"):  # a learned bias broadcast over the batch
        bias_dtype = torch.float32 if kind == "bias32" else dtype
        if kind == "bias-t":
            bias = torch.zeros(1, seq, kv, heads, dtype=bias_dtype, device="cuda")
            return bias.permute(0, 3, 1, 2).detach().requires_grad_(True)
        return torch.zeros(1, heads, seq, kv, dtype=bias_dtype, device="cuda", requires_grad=True)
    if kind == "bool":
        return torch.ones(batch, 1, seq, kv, dtype=torch.bool, device="cuda").tril()
    mask = torch.zeros(batch, 1, seq, kv, dtype=dtype, device="cuda")
    if kind == "float-grad":
        mask.requires_grad_(True)
    return mask


def _inputs(
    batch: int,
    hq: int,
    hkv: int,
    seq: int,
    dim: int,
    dtype: torch.dtype,
    grad: bool,
    kv_seq: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    def make(heads: int, length: int) -> torch.Tensor:
        return torch.randn(
            batch, heads, length, dim, dtype=dtype, device="cuda", requires_grad=grad
        )

    kv = kv_seq or seq
    return make(hq, seq), make(hkv, kv), make(hkv, kv)


def choices() -> list[dict[str, Any]]:
    rows = []
    sm = torch.cuda.get_device_capability()
    sm_int = sm[0] * 10 + sm[1]
    for (dname, dtype), dim, (hq, hkv), (batch, seq) in itertools.product(
        DTYPES.items(), HEAD_DIMS, HEADS, SIZES
    ):
        for grad, causal, mkind in itertools.product((False, True), (False, True), MASKS):
            if causal and mkind != "none":
                continue  # SDPA refuses a mask with is_causal
            q, k, v = _inputs(batch, hq, hkv, seq, dim, dtype, grad)
            mask = _mask(mkind, batch, seq, dtype)
            gqa = hq != hkv
            got = torch_choice(q, k, v, mask, causal=causal)
            predicted = choose_backend(q, k, v, mask, sm_int, gqa)  # dropout 0
            rows.append(
                {
                    "dtype": dname,
                    "head_dim": dim,
                    "heads": [hq, hkv],
                    "batch": batch,
                    "seq": seq,
                    "requires_grad": grad,
                    "causal": causal,
                    "mask": mkind,
                    "torch": got,
                    "memfit": predicted,
                }
            )
            del q, k, v, mask
    torch.cuda.empty_cache()
    return rows


def edges() -> list[dict[str, Any]]:
    """bf16 only, around what the grid leaves open: short sequences, queries shorter than
    the keys (decoding with a cache, chunked prefill), dropout."""
    rows = []
    sm = torch.cuda.get_device_capability()
    sm_int = sm[0] * 10 + sm[1]
    lengths = [(s, s) for s in (2, 8, 16, 64, 128, 256, 511)] + [(1, 2048), (128, 2048)]
    for (seq, kv), dim, (hq, hkv), dropout, grad, mkind in itertools.product(
        lengths, (64, 128), HEADS[1:], (0.0, 0.1), (False, True), ("none", "bool", "float")
    ):
        q, k, v = _inputs(2, hq, hkv, seq, dim, torch.bfloat16, grad, kv)
        mask = _mask(mkind, 2, seq, torch.bfloat16, kv)
        gqa = hq != hkv
        got = torch_choice(q, k, v, mask, dropout)
        rows.append(
            {
                "dtype": "bf16",
                "head_dim": dim,
                "heads": [hq, hkv],
                "batch": 2,
                "seq": seq,
                "kv_seq": kv,
                "dropout": dropout,
                "requires_grad": grad,
                "causal": False,
                "mask": mkind,
                "torch": got,
                "memfit": choose_backend(q, k, v, mask, sm_int, gqa, dropout),
            }
        )
    return rows


def allocations() -> dict[str, Any]:
    """Every allocation one SDPA call (and its backward, with gradients) makes."""
    out: dict[str, Any] = {}
    for name, spec in CALLS.items():
        batch, hq, hkv, seq, dim, dname, causal, mkind, grad = spec[:9]
        dropout = spec[9] if len(spec) > 9 else 0.0
        dtype = DTYPES[dname]
        q, k, v = _inputs(batch, hq, hkv, seq, dim, dtype, grad)
        mask = _mask(mkind, batch, seq, dtype, heads=hq)
        gqa = hq != hkv
        backend = torch_choice(q, k, v, mask, dropout, causal)
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=100000)
        error = None
        try:
            with torch.set_grad_enabled(grad):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal, enable_gqa=gqa
                )
                if grad:
                    o.backward(torch.ones_like(o))
        except RuntimeError as exc:  # torch refuses some calls: that is a finding too
            error, o = str(exc).splitlines()[0][:200], None
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        events = [
            {"action": e["action"], "size": e["size"]}
            for trace in snap["device_traces"]
            for e in trace
            if e["action"] in ("alloc", "free_requested")
        ]
        sm = torch.cuda.get_device_capability()
        predicted = choose_backend(q, k, v, mask, sm[0] * 10 + sm[1], gqa, dropout)
        out[name] = {"backend": backend, "memfit": predicted, "events": events, "error": error}
        del q, k, v, mask, o
        torch.cuda.empty_cache()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "enabled": {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
        },
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    report["choices"] = choices()
    report["edges"] = edges()
    report["allocations"] = allocations()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    wrong = [r for r in report["choices"] if r["torch"] != TORCH_NAMES[r["memfit"]]]
    print(f"{len(report['choices'])} calls, {len(wrong)} where memfit's backend differs")
    for name, call in report["allocations"].items():
        sizes = [e["size"] for e in call["events"] if e["action"] == "alloc"]
        print(name, call["backend"], "memfit:", call["memfit"], sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
