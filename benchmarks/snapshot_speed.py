"""How long ``memfit snapshot`` takes on a large snapshot, and how much memory it needs.

    PYTHONPATH=src python benchmarks/snapshot_speed.py [--entries N] [--file PATH] [--out DIR]

Target: a ~1 GB snapshot pickle (millions of trace entries) in <= 60 s wall and
<= 4 GB peak RSS on a 2-core CPU.

The snapshot is synthetic but shaped like a real one: a GPT-style training loop (24 layers,
bf16, AdamW, a different sequence length every step, ``zero_grad(set_to_none=True)``) run
through memfit's emulated allocator and written as ``torch.cuda.memory._snapshot()`` would be,
recorded with ``_record_memory_history(context='all', stacks='python')``: every entry carries
its Python stack (about 20 frames), with frame dicts and lists shared the way torch shares
them. It is written to /tmp (not the repository), once; later runs reuse it.

``memfit snapshot FILE --json`` then runs in a fresh process, three times (the full command:
read, replay with the recorded settings, four what-if replays, JSON; the median is reported),
and once more with the reading timed on its own. Peak RSS is that of the command's largest
process (it, or a forked what-if worker, whose RSS counts pages it shares with it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pickle
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = Path("/tmp/memfit-bench/snapshot-training-1g.pickle")
DEFAULT_ENTRIES = 10_500_000  # about 1 GB with Python stacks
MiB = 1 << 20

# -- a synthetic training loop ----------------------------------------------------------------


def _frame(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


class _Stacks:
    """Python stacks like torch records them: innermost first, frame dicts shared."""

    TORCH = "/usr/lib/python3.11/site-packages/torch/"

    def __init__(self) -> None:
        t = self.TORCH
        self.call = [
            _frame(t + "nn/modules/module.py", 1784, "_call_impl"),
            _frame(t + "nn/modules/module.py", 1773, "_wrapped_call_impl"),
        ]
        self.outer = [
            _frame("/work/train.py", 51, "train_step"),
            _frame("/work/train.py", 88, "train_epoch"),
            _frame("/work/train.py", 131, "main"),
            _frame("/work/train.py", 140, "<module>"),
            _frame("/usr/lib/python3.11/runpy.py", 88, "_run_code"),
            _frame("/usr/lib/python3.11/runpy.py", 198, "_run_module_as_main"),
        ]
        self.model = [_frame("/work/model.py", 212, "GPT.forward"), *self.call]
        self.stacks: list[list[dict[str, Any]]] = []
        self._index: dict[tuple[str, str], int] = {}

    def get(self, phase: str, op: str) -> int:
        key = (phase, op)
        if key in self._index:
            return self._index[key]
        t = self.TORCH
        inner = [_frame(t + "nn/functional.py", 100 + len(self.stacks), op)]
        if phase == "forward":
            line = 40 + 3 * len(self.stacks)
            stack = [
                *inner,
                _frame("/work/model.py", line, f"Block.{op}"),
                *self.call,
                _frame("/work/model.py", 160, "Block.forward"),
                *self.call,
                *self.model,
                *self.outer,
            ]
        elif phase == "backward":
            stack = [
                *inner,
                _frame(t + "autograd/graph.py", 829, "_engine_run_backward"),
                _frame(t + "autograd/__init__.py", 353, "backward"),
                _frame(t + "_tensor.py", 648, "backward"),
                *self.outer,
            ]
        else:
            stack = [
                *inner,
                _frame(t + "optim/adamw.py", 540, "_multi_tensor_adamw"),
                _frame(t + "optim/adamw.py", 190, "step"),
                _frame(t + "optim/optimizer.py", 493, "wrapper"),
                _frame("/work/train.py", 55, "train_step"),
                *self.outer[1:],
            ]
        self._index[key] = len(self.stacks)
        self.stacks.append(stack)
        return self._index[key]


def training_events(target_events: int, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """Allocations and frees of a training loop, until about ``target_events`` of them."""
    from memfit._events import MemoryEvent

    rng = random.Random(seed)
    stacks = _Stacks()
    layers, hidden, vocab, batch, heads = 24, 2048, 32000, 4, 16
    events: list[MemoryEvent] = []
    next_id = iter(range(1 << 62))

    def alloc(size: int, phase: str, op: str) -> int:
        block = next(next_id)
        events.append(MemoryEvent("alloc", block, size, 0, stacks.get(phase, op)))
        return block

    def free(block: int) -> None:
        events.append(MemoryEvent("free", block, 0))

    shapes = [3 * hidden * hidden, hidden * hidden, 4 * hidden * hidden, 4 * hidden * hidden]
    params = [alloc(2 * n, "forward", "init") for _ in range(layers) for n in shapes]
    params.append(alloc(2 * vocab * hidden, "forward", "init"))
    states: list[int] = []
    while len(events) < target_events:
        seq = rng.randrange(512, 2049, 128)
        tokens = batch * seq
        saved: list[list[int]] = []
        for _ in range(layers):
            keep = [
                alloc(tokens * hidden * 2, "forward", "layer_norm"),
                alloc(tokens * 4 * 2, "forward", "layer_norm_stats"),
                alloc(tokens * 3 * hidden * 2, "forward", "qkv"),
                alloc(tokens * hidden * 2, "forward", "attention"),
                alloc(batch * heads * seq * 4, "forward", "attention_lse"),
            ]
            tmp = alloc(tokens * hidden * 2, "forward", "proj")
            keep.append(alloc(tokens * hidden * 2, "forward", "residual"))
            free(tmp)
            keep += [
                alloc(tokens * hidden * 2, "forward", "layer_norm"),
                alloc(tokens * 4 * 2, "forward", "layer_norm_stats"),
                alloc(tokens * 4 * hidden * 2, "forward", "fc1"),
                alloc(tokens * 4 * hidden * 2, "forward", "gelu"),
            ]
            tmp = alloc(tokens * hidden * 2, "forward", "fc2")
            keep.append(alloc(tokens * hidden * 2, "forward", "residual"))
            free(tmp)
            saved.append(keep)
        logits = alloc(tokens * vocab * 2, "forward", "lm_head")
        loss_tmp = alloc(tokens * vocab * 4, "forward", "cross_entropy")
        loss = alloc(4, "forward", "cross_entropy")
        grad_logits = alloc(tokens * vocab * 2, "backward", "cross_entropy_backward")
        free(loss_tmp)
        free(logits)
        grads = [alloc(2 * vocab * hidden, "backward", "lm_head_backward")]
        grad_x = alloc(tokens * hidden * 2, "backward", "lm_head_backward")
        free(grad_logits)
        for keep in reversed(saved):
            for n, op in zip(reversed(shapes), ("fc2", "fc1", "proj", "qkv"), strict=True):
                tmp = alloc(tokens * max(n // hidden, hidden) * 2, "backward", op + "_backward")
                grads.append(alloc(2 * n, "backward", op + "_weight_grad"))
                small = alloc(rng.choice((512, 4096, 65536)), "backward", op + "_bias_grad")
                free(small)
                free(tmp)
            new_grad_x = alloc(tokens * hidden * 2, "backward", "layer_norm_backward")
            free(grad_x)
            grad_x = new_grad_x
            for block in keep:
                free(block)
        free(grad_x)
        free(loss)
        if not states:  # exp_avg and exp_avg_sq, kept from the first step on
            states = [
                alloc(2 * n, "optimizer", op)
                for op in ("exp_avg", "exp_avg_sq")
                for _ in range(layers)
                for n in shapes
            ]
        for op in ("mul", "addcmul", "sqrt"):
            temps = [alloc(2 * n, "optimizer", op) for _ in range(layers) for n in shapes]
            for block in temps:
                free(block)
        for block in grads:  # zero_grad(set_to_none=True)
            free(block)
    return events, stacks.stacks


def generate(path: Path, entries: int) -> dict[str, Any]:
    """Write the synthetic snapshot to ``path``; returns what it holds."""
    sys.path.insert(0, str(ROOT / "src"))
    from memfit.snapshot._record import synthetic_snapshot

    start = time.perf_counter()
    events, stacks = training_events(int(entries / 1.5))
    snapshot = synthetic_snapshot(events, "", stacks=stacks, free_frames=True)
    n = len(snapshot["device_traces"][0])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    with tmp.open("wb") as fh:
        pickle.dump(snapshot, fh)
    tmp.replace(path)
    return {
        "entries": n,
        "events": len(events),
        "distinct_stacks": len(stacks),
        "bytes": path.stat().st_size,
        "generate_seconds": round(time.perf_counter() - start, 1),
    }


# -- measuring --------------------------------------------------------------------------------


def child_phases(path: str) -> None:
    """Time reading alone, then the whole analysis as the command runs it (fresh process)."""
    start = time.perf_counter()
    import torch

    import memfit.snapshot as snapshot

    imported = time.perf_counter()
    snap = snapshot.load(path)
    loaded = time.perf_counter()
    rss_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    entries = snap.num_entries
    del snap
    again = time.perf_counter()
    rep = snapshot.report(path)  # reads again, with the what-ifs starting meanwhile
    reported = time.perf_counter()
    text = rep.to_json()
    done = time.perf_counter()
    print(
        "RESULT "
        + json.dumps(
            {
                "import_seconds": round(imported - start, 2),
                "load_seconds": round(loaded - imported, 2),
                "report_seconds": round(reported - again, 2),
                "json_seconds": round(done - reported, 2),
                "peak_rss_after_load_bytes": rss_load,
                "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                # the what-if workers (forked: their RSS counts pages shared with the parent)
                "peak_rss_worker_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
                * 1024,
                "entries": entries,
                "events": rep.events,
                "peak_reserved": rep.peak_reserved,
                "replay_check": rep.replay.message,
                "what_if": [[w.label, w.peak_reserved] for w in rep.what_if],
                "recommendation": rep.recommendation,
                "json_bytes": len(text),
                "torch": torch.__version__,
            }
        )
    )


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (read from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [pid], [pid]
    while frontier:
        frontier = [c for c, p in parents.items() if p in frontier]
        found += frontier
    return found


def _memory(pids: list[int]) -> tuple[int, int]:
    """Total RSS and total PSS (shared pages split between the processes) in bytes."""
    rss = pss = 0
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Rss:"):
                rss += int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss += int(line.split()[1]) * 1024
    return rss, pss


def child_cli(path: str) -> None:
    """``memfit snapshot PATH --json`` as a user runs it. Peak RSS is its largest process's
    (this process only waits for it); the memory of it and its workers together is sampled
    every second from /proc, as RSS (shared pages counted in each) and PSS (split)."""
    cmd = [sys.executable, "-m", "memfit", "snapshot", path, "--json"]
    total_rss = total_pss = 0
    with tempfile.TemporaryFile("w+") as out_file, tempfile.TemporaryFile("w+") as err_file:
        start = time.perf_counter()  # output to files: a full pipe would stall the command
        proc = subprocess.Popen(cmd, stdout=out_file, stderr=err_file, text=True)
        while proc.poll() is None:
            rss, pss = _memory(_descendants(proc.pid))
            total_rss, total_pss = max(total_rss, rss), max(total_pss, pss)
            time.sleep(1.0)  # reading smaps_rollup takes CPU from the command: not too often
        wall = time.perf_counter() - start
        out_file.seek(0)
        err_file.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"memfit snapshot failed ({proc.returncode}):\n{err_file.read()}")
        out = json.loads(out_file.read())
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        "RESULT "
        + json.dumps(
            {
                "command": f"memfit snapshot {path} --json",
                "wall_seconds": round(wall, 2),
                "peak_rss_bytes": usage.ru_maxrss * 1024,
                # CPU time of the command and its workers: steadier than wall time on a VM
                "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
                "peak_total_rss_bytes": total_rss,
                "peak_total_pss_bytes": total_pss,
                "peak_reserved": out["peaks"]["reserved"]["bytes"],
                "what_if_rows": len(out["what_if"]),
            }
        )
    )


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _child(args: list[str]) -> dict[str, Any]:
    """Run this script in a fresh process (so this one stays small: a child's peak RSS starts
    from its parent's) and return what it printed after RESULT."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, __file__, *args], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=DEFAULT_ENTRIES)
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="command runs (median reported)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cli", help=argparse.SUPPRESS)
    parser.add_argument("--generate-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_phases(args.child)
        return 0
    if args.cli:
        child_cli(args.cli)
        return 0
    if args.generate_only:
        print("RESULT " + json.dumps(generate(args.file, args.entries)))
        return 0

    info: dict[str, Any] = {}
    if args.regenerate or not args.file.exists():
        print(f"generating {args.file} ...", flush=True)
        info = _child(["--generate-only", "--file", str(args.file), "--entries", str(args.entries)])
        print(json.dumps(info), flush=True)
    info["bytes"] = args.file.stat().st_size

    runs = []
    for _ in range(args.repeat):
        print("running memfit snapshot --json ...", flush=True)
        runs.append(_child(["--cli", str(args.file)]))
        print(json.dumps(runs[-1]), flush=True)
    cli = sorted(runs, key=lambda r: r["wall_seconds"])[len(runs) // 2]  # the median run
    phases = _child(["--child", str(args.file)])
    print(json.dumps(phases), flush=True)

    result = {
        "meta": {
            "date": dt.date.today().isoformat(),
            "cpu": _cpu(),
            "cores": len(os.sched_getaffinity(0)),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            "python": platform.python_version(),
            "torch": phases.pop("torch"),
            "command": "benchmarks/snapshot_speed.py " + " ".join(sys.argv[1:]),
            "target": "<= 60 s wall and <= 4 GB peak RSS on 2 cores for a ~1 GB snapshot",
        },
        "snapshot": {
            "file": str(args.file),
            "description": "synthetic: GPT-style training loop (24 layers, bf16, AdamW, a new "
            "sequence length every step) run through the emulated allocator and written as "
            "torch.cuda.memory._snapshot() records it with context='all', stacks='python' "
            "(about 20 frames on every entry, shared as torch shares them)",
            "entries": phases["entries"],
            "events": phases["events"],
            **info,
        },
        "cli": cli,
        "cli_runs_wall_seconds": [r["wall_seconds"] for r in runs],
        "cli_runs_cpu_seconds": [r["cpu_seconds"] for r in runs],
        "phases": phases,
        # RSS: the largest process; the sum over the command's processes, sampled, is in
        # peak_total_rss_bytes (counts shared pages twice) and peak_total_pss_bytes
        "meets_target": cli["wall_seconds"] <= 60 and cli["peak_total_pss_bytes"] <= 4 * 1000**3,
    }
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "snapshot_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
