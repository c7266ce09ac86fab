"""Record what the real CUDA caching allocator does, to check the emulator against it.

Run by hand on a machine with a CUDA GPU (it is not a test; pytest does not collect it)::

    python tests/allocator/gpu_reference.py OUT.json.gz

For each case in :data:`CASES` it starts a fresh Python process with ``PYTORCH_CUDA_ALLOC_CONF``
set, drives the allocator through ``torch.cuda.caching_allocator_alloc`` / ``_delete`` and
``empty_cache`` with a seeded list of operations, and writes down, after every operation, the
allocator's ``allocated`` and ``reserved`` bytes, plus the full allocator trace (segment
alloc/free/map/unmap with addresses) and the final snapshot. ``test_alloc_reference.py``
replays the same operations through :mod:`memfit.allocator` and compares.

Only the standard library and torch are needed, so the script runs on a bare GPU image.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from typing import Any

__all__ = ["CASES", "Op", "make_ops"]

MiB = 1 << 20

_FRAC = "per_process_memory_fraction:0.03"

# name -> (PYTORCH_CUDA_ALLOC_CONF, workload profile, seed, number of operations, streams)
CASES: dict[str, tuple[str, str, int, int, int]] = {
    "default": ("", "random", 1, 4000, 1),
    "default_iter": ("", "iter", 2, 4000, 1),
    "two_streams": ("", "random", 3, 3000, 2),
    "max_split": ("max_split_size_mb:200", "random", 4, 4000, 1),
    "max_split_rounding": (
        "max_split_size_mb:200,max_non_split_rounding_mb:50",
        "random",
        5,
        3000,
        1,
    ),
    "pow2_4": ("roundup_power2_divisions:4", "random", 6, 3000, 1),
    "pow2_list": ("roundup_power2_divisions:[2:8,256:1,512:2,>:4]", "random", 7, 3000, 1),
    "large_segment": ("large_segment_size_mb:64", "random", 8, 3000, 1),
    "expandable": ("expandable_segments:True", "random", 9, 4000, 1),
    "expandable_iter": ("expandable_segments:True", "iter", 10, 4000, 1),
    "expandable_streams": ("expandable_segments:True", "random", 11, 3000, 2),
    "fraction_oom": (_FRAC, "random", 12, 3000, 1),
    "fraction_split_oom": (
        "max_split_size_mb:100," + _FRAC,
        "random",
        13,
        3000,
        1,
    ),
    "fraction_expandable_oom": (
        "expandable_segments:True," + _FRAC,
        "random",
        14,
        3000,
        1,
    ),
    "gc": (
        "garbage_collection_threshold:0.6,per_process_memory_fraction:0.05",
        "random",
        15,
        3000,
        1,
    ),
}

# real training traces (recorded whole, replayed from the trace): name -> allocator settings
MODEL_CASES = {
    "_model_default": "",
    "_model_expandable": "expandable_segments:True",
    "_model_split": "max_split_size_mb:64,roundup_power2_divisions:4",
}

# budget of live requested bytes the generator aims for, per profile
_BUDGET = {"random": 12 << 30, "iter": 12 << 30}
_FRACTION_BUDGET = 6 << 30

Op = list[Any]  # ["alloc", id, size, stream] | ["free", id] | ["empty_cache"]

_SMALL = [1, 8, 100, 511, 512, 513, 1000, 4096, 65536, 262144, 524288, 1048575, 1048576]
_MEDIUM = [MiB + 1, 2 * MiB, 3 * MiB, 4 * MiB, 5 * MiB + 123, 8 * MiB, 10 * MiB - 1, 10 * MiB]


def _size(rng: random.Random, palette: list[int]) -> int:
    r = rng.random()
    if r < 0.30:
        return rng.choice(_SMALL) if rng.random() < 0.4 else rng.randint(1, MiB)
    if r < 0.55:
        return rng.choice(_MEDIUM) if rng.random() < 0.3 else rng.randint(MiB + 1, 10 * MiB)
    if r < 0.88:
        return rng.choice(palette) if rng.random() < 0.5 else rng.randint(10 * MiB, 256 * MiB)
    return rng.randint(256 * MiB, 1500 * MiB)


def _random_ops(rng: random.Random, n: int, streams: int, budget: int) -> list[Op]:
    palette = [rng.randint(10 * MiB, 300 * MiB) for _ in range(8)]
    ops: list[Op] = []
    live: dict[int, int] = {}
    live_bytes = 0
    next_id = 0
    while len(ops) < n:
        x = rng.random()
        if x < 0.004:
            ops.append(["empty_cache"])
        elif live and (x < 0.45 or live_bytes > budget):
            block = rng.choice(sorted(live))
            live_bytes -= live.pop(block)
            ops.append(["free", block])
        else:
            size = _size(rng, palette)
            stream = 1 if streams > 1 and rng.random() < 0.3 else 0
            live[next_id] = size
            live_bytes += size
            ops.append(["alloc", next_id, size, stream])
            next_id += 1
    return ops


def _iter_ops(rng: random.Random, n: int, streams: int, budget: int) -> list[Op]:
    """Training-like: each iteration allocates a similar list, keeps some, frees the rest."""
    base = [_size(rng, [64 * MiB, 128 * MiB]) for _ in range(60)]
    ops: list[Op] = []
    kept: list[int] = []
    next_id = 0
    while len(ops) < n:
        jitter = rng.choice([0, 0, 1, 2]) * 4096
        step: list[int] = []
        for size in base:
            ops.append(["alloc", next_id, size + jitter, 0])
            step.append(next_id)
            next_id += 1
            if rng.random() < 0.3 and step:
                ops.append(["free", step.pop(rng.randrange(len(step)))])
        rng.shuffle(step)
        keep = step[: rng.randint(0, 3)]
        for block in step[len(keep) :]:
            ops.append(["free", block])
        kept.extend(keep)
        while len(kept) > 20:
            ops.append(["free", kept.pop(0)])
        if rng.random() < 0.05:
            ops.append(["empty_cache"])
    return ops[:n]


def make_ops(case: str) -> list[Op]:
    """The operations of one case, the same on every machine (seeded ``random.Random``)."""
    conf, profile, seed, n, streams = CASES[case]
    rng = random.Random(seed)
    budget = _FRACTION_BUDGET if "fraction" in conf else _BUDGET[profile]
    if profile == "iter":
        return _iter_ops(rng, n, streams, budget)
    return _random_ops(rng, n, streams, budget)


def _child(case: str, out_path: str) -> None:  # pragma: no cover - needs a GPU
    import torch

    ops = make_ops(case)
    torch.cuda.init()
    props = torch.cuda.get_device_properties(0)
    free0, total0 = torch.cuda.mem_get_info()
    torch.cuda.memory._record_memory_history(
        enabled="all", context=None, stacks="python", max_entries=10_000_000
    )
    side = torch.cuda.Stream()
    stream_of = {0: torch.cuda.current_stream(), 1: side}
    ptrs: dict[int, int] = {}
    records: list[list[int]] = []
    for op in ops:
        oom = 0
        if op[0] == "alloc":
            try:
                ptrs[op[1]] = torch.cuda.caching_allocator_alloc(op[2], 0, stream_of[op[3]])
            except torch.OutOfMemoryError:
                oom = 1
        elif op[0] == "free":
            if op[1] in ptrs:
                torch.cuda.caching_allocator_delete(ptrs.pop(op[1]))
        else:
            torch.cuda.empty_cache()
        st = torch.cuda.memory_stats()
        records.append([st["allocated_bytes.all.current"], st["reserved_bytes.all.current"], oom])
    snap = torch.cuda.memory._snapshot()
    stats = torch.cuda.memory_stats()
    trace, segments = _summarize(snap)
    result = {
        "case": case,
        "conf": CASES[case][0],
        "torch": torch.__version__,
        "device": props.name,
        "total_memory": props.total_memory,
        "mem_get_info": [free0, total0],
        "streams": {"0": stream_of[0].cuda_stream, "1": side.cuda_stream},
        "allocator_settings": {k: repr(v) for k, v in snap.get("allocator_settings", {}).items()},
        "ops": ops,
        "records": records,
        "trace": trace,
        "segments": segments,
        "stats": {k: v for k, v in stats.items() if isinstance(v, int)},
    }
    with open(out_path, "w") as f:
        json.dump(result, f)


def _summarize(snap: dict[str, Any]) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    """The trace rows and segments of a ``torch.cuda.memory._snapshot()``, without frames."""
    trace = [
        [e["action"], e.get("addr", 0), e.get("size", 0), e.get("stream", 0)]
        for e in snap["device_traces"][0]
    ]
    segments = [
        {
            "address": s["address"],
            "total_size": s["total_size"],
            "stream": s["stream"],
            "segment_type": s["segment_type"],
            "is_expandable": s.get("is_expandable"),
            "blocks": [
                [b["address"], b["size"], b["requested_size"], b["state"]] for b in s["blocks"]
            ],
        }
        for s in snap["segments"]
    ]
    return trace, segments


def _model_child(out_path: str) -> None:  # pragma: no cover - needs a GPU
    """A real workload: a few training steps of a small transformer, traced by torch."""
    import torch

    torch.manual_seed(0)
    torch.cuda.memory._record_memory_history(
        enabled="all", context=None, stacks="python", max_entries=10_000_000
    )
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    model = torch.nn.Sequential(
        torch.nn.Embedding(8192, 512), torch.nn.TransformerEncoder(layer, 6)
    )
    model = model.cuda()
    head = torch.nn.Linear(512, 8192).cuda()
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for step in range(4):
        batch = 8 + 3 * step  # changing shapes, as in inference with varying batch sizes
        x = torch.randint(0, 8192, (batch, 256), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=step % 2 == 1):
            loss = torch.nn.functional.cross_entropy(
                head(model(x)).float().flatten(0, 1), x.flatten()
            )
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, loss
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    trace, segments = _summarize(snap)
    with open(out_path, "w") as f:
        json.dump(
            {
                "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                "torch": torch.__version__,
                "total_memory": torch.cuda.get_device_properties(0).total_memory,
                "trace": trace,
                "segments": segments,
                "stats": {k: v for k, v in torch.cuda.memory_stats().items() if isinstance(v, int)},
            },
            f,
        )


def _va_child(out_path: str) -> None:  # pragma: no cover - needs a GPU
    """How the driver places cudaMalloc'd segments after frees (tie-break order in best fit)."""
    import torch

    torch.cuda.init()
    alloc = torch.cuda.caching_allocator_alloc
    delete = torch.cuda.caching_allocator_delete
    rng = random.Random(99)
    log: list[list[int]] = []
    live: dict[int, int] = {}
    for i in range(400):
        if live and rng.random() < 0.45:
            key = rng.choice(sorted(live))
            delete(live.pop(key))
            torch.cuda.empty_cache()
            log.append([0, key, 0])
        else:
            size = rng.choice([2, 4, 10, 12, 20, 22, 40, 64, 100, 256]) * MiB
            if rng.random() < 0.2:
                size = rng.randint(1, 1000) * 512  # small pool: 2 MiB segments
            live[i] = alloc(size, 0)
            log.append([1, i, size, live[i]])
    with open(out_path, "w") as f:
        json.dump({"log": log}, f)


def compact(result: dict[str, Any]) -> dict[str, Any]:
    """Keep what the comparison needs: segment events and block addresses, not every entry."""
    trace = result["trace"]
    out = {k: v for k, v in result.items() if k not in ("trace", "stats", "mem_get_info")}
    out["segment_trace"] = [t[:3] for t in trace if t[0].startswith("segment_")]
    out["alloc_addresses"] = [t[1] for t in trace if t[0] == "alloc"]
    return out


def main(out: str) -> None:  # pragma: no cover - needs a GPU
    results: dict[str, Any] = {}
    tmp = out + ".part"
    only = os.environ.get("GPU_REFERENCE_ONLY")  # e.g. "models" to record the model traces only
    for case, (conf, *_rest) in CASES.items():
        if only == "models":
            continue
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        proc = subprocess.run(
            [sys.executable, __file__, "--child", case, tmp],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            results[case] = {"error": proc.stderr[-4000:]}
            print(case, "FAILED", proc.stderr[-2000:], flush=True)
            continue
        with open(tmp) as f:
            results[case] = compact(json.load(f))
        print(case, "ok", len(results[case]["segment_trace"]), "segment events", flush=True)
    for name, conf in MODEL_CASES.items():
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        proc = subprocess.run(
            [sys.executable, __file__, "--model", tmp], env=env, capture_output=True, text=True
        )
        if proc.returncode == 0:
            with open(tmp) as f:
                results[name] = json.load(f)
            print(name, "ok", len(results[name]["trace"]), "trace entries", flush=True)
        else:
            results[name] = {"error": proc.stderr[-4000:]}
            print(name, "FAILED", proc.stderr[-2000:], flush=True)
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="")
    proc = subprocess.run(
        [sys.executable, __file__, "--va", tmp], env=env, capture_output=True, text=True
    )
    if proc.returncode == 0:
        with open(tmp) as f:
            results["_va"] = json.load(f)
    else:
        results["_va"] = {"error": proc.stderr[-4000:]}
    with gzip.open(out, "wt") as f:
        json.dump(results, f)


if __name__ == "__main__":  # pragma: no cover - needs a GPU
    if sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--model":
        _model_child(sys.argv[2])
    elif sys.argv[1] == "--va":
        _va_child(sys.argv[2])
    else:
        main(sys.argv[1])
