"""AutoMicrobatch on a real GPU: force out-of-memory errors with a memory fraction, check that
the guarded run ends with the parameters of the unsplit run, and time both.

For each model: an unsplit reference run (AdamW, a few steps, no limit) measures the peak; then
``torch.cuda.set_per_process_memory_fraction`` caps the process at the persistent state
(parameters, gradients, AdamW's two moments) plus 40% of the reference's working set, so the
whole batch cannot fit, and the same steps run under the guard from the same initial weights.
Dropout is off (its random draws would differ); ResNet-50's batch norm is frozen (eval mode),
as in fine-tuning, because batch statistics change with the micro-batch.

Usage, from the repository root (about a minute on an H200):

    PYTHONPATH=src python benchmarks/guard_gpu.py --out $OUT/guard_gpu.json
    PYTHONPATH=src python benchmarks/guard_gpu.py --device cpu --dry-run --out /tmp/g.json

``--dry-run`` uses tiny configurations and, without a GPU, ``memfit.runtime.InjectOOM`` in
place of the memory fraction: it checks the script, not the GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import memfit
from memfit.runtime import InjectOOM

WORKING_SHARE = 0.4  # of the reference's working set allowed under the fraction
LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]


Workload = tuple[Callable[[], torch.nn.Module], list[Any], LossFn]


def _language_model(
    model_cls: Any, config: Any, batch: int, seq: int, steps: int, device: str
) -> Workload:
    g = torch.Generator().manual_seed(0)
    batches = [
        torch.randint(config.vocab_size, (batch, seq), generator=g).to(device) for _ in range(steps)
    ]
    return (lambda: model_cls(config)), batches, lambda m, ids: m(input_ids=ids, labels=ids).loss


def bert(dry: bool, device: str, steps: int) -> Workload:
    from transformers import BertConfig, BertForMaskedLM

    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    config = BertConfig(
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **(size if dry else {})
    )
    return _language_model(
        BertForMaskedLM, config, 8 if dry else 32, 32 if dry else 512, steps, device
    )


def gpt2(dry: bool, device: str, steps: int) -> Workload:
    from transformers import GPT2Config, GPT2LMHeadModel

    size = dict(n_embd=32, n_layer=2, n_head=2)
    config = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **(size if dry else {}))
    return _language_model(
        GPT2LMHeadModel, config, 8 if dry else 16, 32 if dry else 1024, steps, device
    )


def resnet50(dry: bool, device: str, steps: int) -> Workload:
    import torchvision

    def make() -> torch.nn.Module:
        model = torchvision.models.resnet50(num_classes=1000)
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.eval()  # frozen statistics: the same for any micro-batch
        return model

    g = torch.Generator().manual_seed(0)
    n, side = (8, 32) if dry else (128, 224)
    batches = [
        (
            torch.randn(n, 3, side, side, generator=g).to(device),
            torch.randint(1000, (n,), generator=g).to(device),
        )
        for _ in range(steps)
    ]
    return make, batches, lambda m, b: F.cross_entropy(m(b[0]), b[1])


MODELS = {"bert-base-mlm": bert, "gpt2": gpt2, "resnet50": resnet50}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _build(make: Callable[[], torch.nn.Module], device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = make().to(device)
    model.train()
    for module in model.modules():  # keep frozen batch norm frozen after .train()
        if isinstance(module, torch.nn.BatchNorm2d):
            module.eval()
    return model


def _reference(
    make: Callable[[], torch.nn.Module], batches: list[Any], loss_fn: LossFn, device: str
) -> dict[str, Any]:
    model = _build(make, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for batch in batches:
        _sync(device)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        opt.step()
        _sync(device)
        times.append(time.perf_counter() - start)
    params = [p.detach().float().cpu() for p in model.parameters()]
    persistent = 4 * sum(p.numel() * p.element_size() for p in model.parameters())
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"params": params, "times": times, "peak": peak, "persistent": persistent}


def _guarded(
    make: Callable[[], torch.nn.Module], batches: list[Any], loss_fn: LossFn, device: str, dry: bool
) -> dict[str, Any]:
    model = _build(make, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    guard = memfit.AutoMicrobatch(model, opt, loss_fn, grow_after=None)
    first = batches[0][0] if isinstance(batches[0], tuple) else batches[0]
    injector = (
        InjectOOM(model, max_samples=max(first.shape[0] // 4, 1)) if device != "cuda" else None
    )
    times = []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for batch in batches:
        _sync(device)
        start = time.perf_counter()
        guard.step(batch)
        _sync(device)
        times.append(time.perf_counter() - start)
    if injector is not None:
        injector.remove()
    params = [p.detach().float().cpu() for p in model.parameters()]
    out = {
        "params": params,
        "times": times,
        "peak": torch.cuda.max_memory_allocated() if device == "cuda" else None,
        "microbatch_size": guard.microbatch_size,
        "incidents": [i.to_dict() for i in guard.incidents],
    }
    del model, opt, guard
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def run_one(name: str, device: str, dry: bool, steps: int) -> dict[str, Any]:
    make, batches, loss_fn = MODELS[name](dry, device, steps)
    ref = _reference(make, batches, loss_fn, device)
    limit = None
    if device == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        limit = int(ref["persistent"] + WORKING_SHARE * (ref["peak"] - ref["persistent"]))
        torch.cuda.set_per_process_memory_fraction(limit / total)
    try:
        got = _guarded(make, batches, loss_fn, device, dry)
    finally:
        if device == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0)
    diffs = [(a - b).abs().max().item() for a, b in zip(ref["params"], got["params"], strict=True)]
    scale = max(p.abs().max().item() for p in ref["params"])
    return {
        "model": name,
        "batch_size": (batches[0][0] if isinstance(batches[0], tuple) else batches[0]).shape[0],
        "steps": steps,
        "limit_bytes": limit,
        "reference_peak_allocated": ref["peak"],
        "guarded_peak_allocated": got["peak"],
        "microbatch_size": got["microbatch_size"],
        "incidents": got["incidents"],
        "max_abs_param_diff": max(diffs),
        "max_abs_param": scale,
        "reference_step_s": ref["times"],
        "guarded_step_s": got["times"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--dry-run", action="store_true", help="tiny models: checks the script")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=sorted(MODELS), default=None)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("No CUDA GPU here; use --device cpu --dry-run to check the script.", file=sys.stderr)
        return 2
    results = []
    for name in args.only or list(MODELS):
        result = run_one(name, args.device, args.dry_run, args.steps)
        guarded = ", ".join(f"{t:.3f}" for t in result["guarded_step_s"])
        plain = ", ".join(f"{t:.3f}" for t in result["reference_step_s"])
        print(
            f"{name}: micro-batch {result['microbatch_size']} of {result['batch_size']}, "
            f"{len(result['incidents'])} incidents, "
            f"max |param diff| {result['max_abs_param_diff']:.3g}, "
            f"steps {guarded} s (guarded) vs {plain} s (unsplit, no limit)"
        )
        results.append(result)
    payload = {
        "benchmark": "guard_gpu",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "dry_run": args.dry_run,
        "working_share": WORKING_SHARE,
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
