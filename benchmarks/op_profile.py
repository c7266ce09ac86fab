"""Where a training step's time goes on the GPU, op by op: the ground truth the planner's
step-time model is fitted and checked against.

    PYTHONPATH=src python benchmarks/op_profile.py --plans PLANS.json --out DIR [--extra]
        [--held-out] [--no-profile] [--steps 10]

For each plan of ``plan_proof.py``'s ``PLANS.json`` (its chosen configuration), with
``--extra`` the configurations of ``EXTRA`` (float32 and large micro-batches the plans do not
reach), and with ``--held-out`` those of ``HELD_OUT`` (models the step-time model was not
fitted on, predicted before they run: ``op_predict.py``), one process per model runs memfit's
own step loop on the GPU, three ways:

* ``loop``: as ``memfit validate`` runs it, a batch made on the host and copied each micro-batch
  (``step_times.measure``);
* ``on_gpu``: the same loop given a batch already on the GPU (what a step applied to a user's
  batch does; the host's batch-making is the user's data loader's);
* ``profile``: the ``on_gpu`` loop under ``torch.profiler`` (shapes recorded) for four steps;
  of the fourth step kept: every op that launched kernels (by phase, name and input shapes:
  calls, the kernels' GPU seconds, each kernel name's calls and GPU seconds), the GPU's busy
  seconds and the step's wall seconds under the profiler (not with ``--no-profile``; ``loop``
  not with ``--no-loop``).

Each configuration also records the host's speed: ``host_probe.py``'s probe (small ops on the
CPU) and ``calibrate_gpu.py``'s dispatch of small CUDA ops. Each configuration's row is written
to ``DIR/<model>.json`` as soon as it is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import statistics
import subprocess
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

from results_io import read_json

sys.path.insert(0, str(Path(__file__).parent))

EXTRA: list[tuple[str, dict[str, Any]]] = [
    ("bert-base-uncased", {"batch_size": 32, "seq_len": 512, "precision": "fp32"}),
    ("gpt2", {"batch_size": 8, "seq_len": 1024, "precision": "fp32"}),
    ("gpt2", {"batch_size": 16, "seq_len": 1024, "precision": "bf16-mixed"}),
    ("timm:vit_base_patch16_224", {"batch_size": 64, "precision": "fp32"}),
    ("tv:resnet50", {"batch_size": 64, "precision": "fp32"}),
    ("tv:resnet50", {"batch_size": 128, "precision": "bf16-mixed"}),
    ("tinyllama-1.1b", {"batch_size": 4, "seq_len": 2048, "precision": "bf16-mixed"}),
]


HELD_OUT: list[tuple[str, dict[str, Any]]] = [
    ("gpt2-medium", {"batch_size": 8, "seq_len": 1024, "precision": "bf16-mixed"}),
    ("bert-large-uncased", {"batch_size": 16, "seq_len": 512, "precision": "bf16-mixed"}),
    ("roberta-base", {"batch_size": 32, "seq_len": 512, "precision": "bf16-mixed"}),
    ("t5-small", {"batch_size": 16, "seq_len": 512, "precision": "bf16-mixed"}),
    ("tv:convnext_tiny", {"batch_size": 64, "precision": "bf16-mixed"}),
    ("tv:efficientnet_b0", {"batch_size": 128, "precision": "bf16-mixed"}),
    ("tv:vit_b_16", {"batch_size": 64, "precision": "bf16-mixed"}),
    (
        "gpt2-large",
        {
            "batch_size": 4,
            "seq_len": 1024,
            "precision": "bf16-mixed",
            "activation_checkpointing": True,
        },
    ),
    (
        "llama-2-7b",
        {"batch_size": 1, "seq_len": 1024, "precision": "bf16", "optimizer": "adamw-fused"},
    ),
    ("bert-large-uncased", {"batch_size": 8, "seq_len": 512, "precision": "fp32"}),
]


# the second held-out set, predicted after the first was measured (its efficientnet and
# torchvision ViT rows repeat the first set's, whose files did not come back from the GPU host)
HELD_OUT_2: list[tuple[str, dict[str, Any]]] = [
    ("tv:efficientnet_b0", {"batch_size": 128, "precision": "bf16-mixed"}),
    ("tv:vit_b_16", {"batch_size": 64, "precision": "bf16-mixed"}),
    ("tv:convnext_tiny", {"batch_size": 128, "precision": "bf16-mixed"}),
    ("tv:mobilenet_v3_large", {"batch_size": 256, "precision": "bf16-mixed"}),
    ("tv:regnet_y_1_6gf", {"batch_size": 128, "precision": "fp32"}),
    ("t5-base", {"batch_size": 8, "seq_len": 512, "precision": "bf16-mixed"}),
]


# compiled steps under torch.compile's activation memory budget: what recomputing
# costs a compiled step, kernel by kernel (inductor's triton kernels and the extern ones)
COMPILED_BUDGET: list[tuple[str, dict[str, Any]]] = [
    *(
        (
            "benchmarks/models/compiled_gpt2.py:make_model",
            {
                "batch_size": 8,
                "seq_len": 1024,
                "precision": "bf16-mixed",
                "activation_memory_budget": budget,
            },
        )
        for budget in (1.0, 0.5, 0.2, 0.0)
    ),
    *(
        (
            "benchmarks/models/compiled_llama.py:make_model",
            {
                "batch_size": 4,
                "seq_len": 1024,
                "precision": "bf16-mixed",
                "activation_memory_budget": budget,
            },
        )
        for budget in (1.0, 0.5)
    ),
    # GPU work negligible: the host's cost per op of a compiled step
    (
        "benchmarks/models/compiled_gpt2_tiny.py:make_model",
        {"batch_size": 2, "seq_len": 64, "precision": "bf16-mixed"},
    ),
]


def configurations(
    plans: Path | None,
    extra: bool,
    held_out: bool = False,
    held_out_2: bool = False,
    compiled_budget: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """Settings to run, by model: the plans' chosen configurations, ``EXTRA``'s, ``HELD_OUT``'s,
    ``HELD_OUT_2``'s, ``COMPILED_BUDGET``'s."""
    from plan_proof import _settings

    by_model: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in read_json(plans)["rows"] if plans else []:
        chosen = row["plan"]["chosen"]
        if chosen is None:
            continue
        by_model[row["model"]].append(
            {
                "source": f"plan {row['budget']}",
                "settings": _settings(row, chosen),
                "allocator_config": chosen["allocator_config"],
            }
        )
    if extra:
        for model, settings in EXTRA:
            by_model[model].append({"source": "extra", "settings": settings})
    if held_out:
        for model, settings in HELD_OUT:
            by_model[model].append({"source": "held-out", "settings": settings})
    if held_out_2:
        for model, settings in HELD_OUT_2:
            by_model[model].append({"source": "held-out-2", "settings": settings})
    if compiled_budget:
        for model, settings in COMPILED_BUDGET:
            by_model[model].append({"source": "compiled-budget", "settings": settings})
    return by_model


def run_model(
    model: str,
    configs: list[dict[str, Any]],
    steps: int,
    out: Path,
    profile: bool = True,
    with_loop: bool = True,
) -> None:
    from host_probe import probe_seconds
    from step_times import measure

    rows = []
    for config in configs:
        from calibrate_gpu import cpu_dispatch

        row = {
            "model": model,
            **config,
            "host_probe_seconds": probe_seconds(),
            "cuda_dispatch_seconds": cpu_dispatch(),
        }
        row["loop"] = measure(model, config["settings"], steps) if with_loop else {}
        row["on_gpu"] = _on_gpu_loop(model, config["settings"], steps, profile=False)
        row["profile"] = _on_gpu_loop(model, config["settings"], 4, profile=True) if profile else {}
        rows.append(row)
        loop, on_gpu, prof = row["loop"], row["on_gpu"], row["profile"]
        print(
            f"{model:26s} {config['source']:10s} loop {loop.get('step_seconds', 0) * 1e3:7.1f} "
            f"on_gpu {on_gpu.get('step_seconds', 0) * 1e3:7.1f} profiled "
            f"{prof.get('wall_seconds', 0) * 1e3:7.1f} "
            f"busy {prof.get('busy_seconds', 0) * 1e3:7.1f} ms "
            f"probe {row['host_probe_seconds'] * 1e6:.2f} us {loop.get('error', '')[:60]}"
            f"{prof.get('error', '')[:60]}",
            flush=True,
        )
        out.write_text(json.dumps(rows) + "\n")


def _on_gpu_loop(model: str, settings: dict[str, Any], steps: int, profile: bool) -> dict[str, Any]:
    import torch
    import torch._dynamo

    from memfit.technique.compilation import compiled_with_budget
    from memfit.workload import StepHooks, make_workload, optimizer_for, prepare_model, run_steps

    row: dict[str, Any] = {}
    stack = contextlib.ExitStack()
    torch._dynamo.reset()  # a compiled model compiles afresh, with this row's budget
    try:
        workload = make_workload(model, steps=steps, gpu="h200", **settings)
        # a compiled model compiles with it at its first call
        stack.enter_context(compiled_with_budget(workload.activation_memory_budget))
        torch.cuda.empty_cache()
        batch = _to_cuda(workload.make_batch())
        workload = dataclasses.replace(workload, make_batch=lambda: batch)
        net = prepare_model(workload, "cuda")
        optimizer = optimizer_for(workload, net)
        marks: list[float] = []
        started: set[str] = set()
        ranges: list[Any] = []

        def phase(label: str) -> None:
            step = label.partition(".")[0]
            if profile:
                if ranges:
                    ranges.pop().__exit__(None, None, None)
                if label != "end":
                    ranges.append(torch.profiler.record_function(f"memfit.{label}"))
                    ranges[-1].__enter__()
            if label == "end" or (label.endswith(".input") and step not in started):
                started.add(step)
                torch.cuda.synchronize()
                marks.append(time.perf_counter())

        hooks = StepHooks(
            to_device=lambda b: b,
            autocast=lambda dtype: torch.autocast("cuda", dtype=dtype),
            grad_scaler=lambda: torch.amp.GradScaler("cuda"),
            phase=phase,
        )
        if not profile:
            run_steps(workload, net, optimizer, hooks)
            times = [b - a for a, b in itertools.pairwise(marks)]
            row.update(
                step_seconds=statistics.median(times[2:]),
                all_step_seconds=[round(t, 5) for t in times],
            )
        else:
            from torch.profiler import ProfilerActivity

            with torch.profiler.profile(
                activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True
            ) as prof:
                run_steps(workload, net, optimizer, hooks)
            times = [b - a for a, b in itertools.pairwise(marks)]
            row.update(_summarize(prof, f"step{steps}."))
            row["wall_seconds"] = times[-1]
        del net, optimizer
    except Exception as exc:  # kept; the next configuration runs
        row["error"] = f"{type(exc).__name__}: {exc}"[:600]
        row["traceback"] = traceback.format_exc()[-2000:]
    finally:
        stack.close()
    torch.cuda.empty_cache()
    return row


def _summarize(prof: Any, step: str) -> dict[str, Any]:
    """The kept step's ops that launched kernels, aggregated by (phase, name, shapes), and the
    GPU's busy seconds in it."""
    events = prof.events()
    phases = [
        e for e in events if e.name.startswith(f"memfit.{step}") and e.device_type.name == "CPU"
    ]
    spans = [(e.time_range.start, e.time_range.end, e.name.removeprefix("memfit.")) for e in phases]

    def phase_of(t: float) -> str | None:
        for start, end, name in spans:
            if start <= t <= end:
                return name
        return None

    ops: dict[tuple[str, str, str], dict[str, Any]] = {}
    busy = 0.0
    for ev in events:
        if ev.device_type.name != "CPU" or not ev.kernels:
            continue
        where = phase_of(ev.time_range.start)
        if where is None:
            continue
        seconds = sum(k.duration for k in ev.kernels) * 1e-6
        busy += seconds
        # a compiled step launches triton kernels through the driver: named by kernel
        name = ev.kernels[0].name[:120] if ev.name.startswith("cuLaunchKernel") else ev.name
        key = (where, name, json.dumps(ev.input_shapes))
        entry = ops.setdefault(
            key, {"calls": 0, "gpu_seconds": 0.0, "kernels": {}, "kernel_seconds": {}}
        )
        entry["calls"] += 1
        entry["gpu_seconds"] += seconds
        for k in ev.kernels:  # by name: an op's kernels differ (a cast's unrolled, a memcpy)
            kernel = k.name[:120]
            entry["kernels"][kernel] = entry["kernels"].get(kernel, 0) + 1
            entry["kernel_seconds"][kernel] = (
                entry["kernel_seconds"].get(kernel, 0.0) + k.duration * 1e-6
            )
    rows = [{"phase": p, "name": n, "shapes": json.loads(s), **v} for (p, n, s), v in ops.items()]
    return {"ops": rows, "busy_seconds": busy}


def _to_cuda(batch: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, batch)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--extra", action="store_true")
    parser.add_argument("--held-out", action="store_true")
    parser.add_argument("--held-out-2", action="store_true")
    parser.add_argument("--compiled-budget", action="store_true")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--no-loop", action="store_true")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    by_model = configurations(
        args.plans, args.extra, args.held_out, args.held_out_2, args.compiled_budget
    )
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        path = args.out / _file(args.child)
        run_model(
            args.child,
            by_model[args.child],
            args.steps,
            path,
            not args.no_profile,
            not args.no_loop,
        )
        return 0
    import torch

    meta = {
        "date": dt.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    for model in by_model:
        cmd = [sys.executable, __file__, "--out", str(args.out), "--child", model]
        cmd += ["--steps", str(args.steps)] + (["--plans", str(args.plans)] if args.plans else [])
        for flag in ("extra", "held_out", "held_out_2", "compiled_budget", "no_profile", "no_loop"):
            if getattr(args, flag):
                cmd.append("--" + flag.replace("_", "-"))
        subprocess.run(cmd, check=False)
    return 0


def _file(model: str) -> str:
    return model.replace(":", "_").replace("/", "_") + ".json"


if __name__ == "__main__":
    raise SystemExit(main())
