"""The zoo sweep's GPU side: each workload measured in memfit's own loop, many per process.

Each workload runs as ``memfit validate`` measures one (``memfit.estimator.measure``): the model
built on the GPU with the entry's seed, the pool emptied after the setup, the peak statistics
reset, then the steps (training: two of forward, loss, backward, AdamW step, zero_grad;
inference: one forward under ``torch.no_grad``), and ``max_memory_allocated`` /
``max_memory_reserved`` read. Between workloads everything is let go: the collector, the
cache, cuBLAS's workspaces and the peaks, and ``memory_reserved()`` must be 0 before the next
(the bytes are recorded where it is not). An out-of-memory error or any other is recorded and
the sweep goes on; a CUDA error that poisons the process ends it (the next call goes on).

A call stops cleanly before ``budget_seconds`` and the next call resumes: ids already in the
output are skipped; one that was started and never finished (the process was killed) is
recorded as interrupted. ``dry_run`` runs the same loop on the CPU for a few tiny models.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo_inputs import workload_for
from zoo_pool import error_of
from zoo_run import workloads_of

__all__ = ["dry_run_entries", "run_measure", "shard_of"]

STOP_MARGIN = 20.0  # seconds kept back at the end of a call's budget
DRY_BATCH = 2


class WorkloadTimeout(Exception):
    """A workload ran past its time limit."""


@contextmanager
def _limit(seconds: float) -> Iterator[None]:
    def expired(signum: int, frame: Any) -> None:
        raise WorkloadTimeout(f"ran past {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, max(1.0, seconds))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def shard_of(items: list[Any], shard: tuple[int, int]) -> list[Any]:
    """Shard ``k`` of ``n`` (1-based): every n-th item from the k-th, so each shard has its
    share of every source and size."""
    k, n = shard
    return items[k - 1 :: n]


def dry_run_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The smallest entry (by parameters) of each way the sweep builds a model: memfit's
    torchvision and timm names, memfit's ``hf:config.json`` and a head the sweep feeds."""
    kinds: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if "error" in entry or not entry.get("workloads") or not entry.get("params"):
            continue
        build = entry["build"]
        if build["kind"] == "torchvision":
            continue  # detection, video...: too slow for a check on the CPU
        kind = f"{entry['source']}/{build.get('via', build['kind'])}"
        if kind not in kinds or entry["params"] < kinds[kind]["params"]:
            kinds[kind] = entry
    return [kinds[k] for k in sorted(kinds)]


# -- one workload --------------------------------------------------------------------------------


def _fresh_state(cuda: bool) -> int:
    """Let go of everything; the reserved bytes left (0 on the CPU)."""
    gc.collect()
    if not cuda:
        return 0
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.reset_peak_memory_stats()
    return int(torch.cuda.memory_reserved())


def _measure_on_gpu(workload: Any) -> dict[str, Any]:
    from memfit.estimator import measure

    measured, _ = measure(workload)
    row = measured.to_dict()
    row.pop("versions", None)
    return row


def _run_on_cpu(workload: Any) -> dict[str, Any]:
    """memfit's measurement loop with the CPU for the GPU: the code path, no memory numbers."""
    import torch

    from memfit.technique import GpuPlace  # the zoo asks for no technique: never used
    from memfit.workload import (
        StepHooks,
        engage,
        held_view_on,
        optimizer_for,
        prepare_model,
        run_steps,
    )

    model = prepare_model(workload, "cpu")
    optimizer = optimizer_for(workload, model)
    model, optimizer = engage(workload, model, optimizer, GpuPlace())
    hooks = StepHooks(
        to_device=lambda batch: batch, autocast=lambda dtype: torch.autocast("cpu", dtype=dtype)
    )
    hooks.held_view = held_view_on(workload, "cpu")
    start = time.perf_counter()
    run_steps(workload, model, optimizer, hooks)
    return {"step_seconds": (time.perf_counter() - start) / workload.steps}


def _one(entry: dict[str, Any], workload: dict[str, Any], cuda: bool) -> dict[str, Any]:
    import torch

    seed = int(entry.get("seed", 0))
    torch.manual_seed(seed)
    made = workload_for(entry, workload["mode"], workload["batch_size"])
    return _measure_on_gpu(made) if cuda else _run_on_cpu(made)


def _poisoned() -> bool:
    """Whether the CUDA context is unusable after an error (an illegal access, a device-side
    assert): then only a new process goes on."""
    import torch

    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda")
    except Exception:
        return True
    return False


# -- the loop ------------------------------------------------------------------------------------


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _state(rows: list[dict[str, Any]]) -> tuple[set[str], set[str], set[str]]:
    """Ids with a result, ids started without one, ids to run again (cut by a budget)."""
    results = {
        r["id"]
        for r in rows
        if "id" in r and ("error" in r or "peak_reserved" in r or "step_seconds" in r)
    }
    started = {r["id"] for r in rows if r.get("start")}
    retry = {r["id"] for r in rows if r.get("retry")}
    return results, started - results - retry, retry - results


def _gpu_meta(cuda: bool) -> dict[str, Any]:
    import torch
    from zoo_run import machine

    found: dict[str, Any] = {"cuda": torch.version.cuda, **machine()}
    if not cuda:
        return {**found, "device": "cpu (dry run: no memory numbers)"}
    props = torch.cuda.get_device_properties(0)
    found.update(gpu=torch.cuda.get_device_name(), gpu_memory=int(props.total_memory))
    found["cudnn"] = torch.backends.cudnn.version()
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        found["driver"] = subprocess.run(query, capture_output=True, text=True).stdout.strip()
    except OSError:
        found["driver"] = None
    found["allocator_config"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return found


def run_measure(
    models: Path,
    out: Path,
    shard: tuple[int, int],
    budget: float,
    workload_seconds: float,
    dry_run: bool = False,
) -> int:
    """Measure shard ``shard`` of the workloads not yet in ``out``; 0 when the call ended
    cleanly (all done or the budget spent), 3 when a CUDA error ended it."""
    import torch

    start = time.monotonic()
    cuda = not dry_run
    if cuda and not torch.cuda.is_available():
        print("error: no CUDA GPU here; use --dry-run to check the loop on the CPU", flush=True)
        return 2
    entries = json.loads(models.read_text())["entries"]
    if dry_run:
        entries = dry_run_entries(entries)
    pairs = [(e, w) for e in entries for w in workloads_of(e)]
    if dry_run:
        pairs = [(e, {**w, "batch_size": DRY_BATCH}) for e, w in pairs]
    else:
        pairs = shard_of(pairs, shard)
    rows = _read(out)
    results, interrupted, retry = _state(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as fh:

        def write(row: dict[str, Any]) -> None:
            fh.write(json.dumps(row, default=str) + "\n")
            fh.flush()

        meta = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python", *sys.argv]),
            "shard": list(shard),
        }
        write({"meta": {**meta, **_gpu_meta(cuda)}})
        for wid in sorted(interrupted):
            message = "the process ended during this workload (killed, crashed or out of time)"
            write({"id": wid, "error": {"type": "Interrupted", "message": message}})
            results.add(wid)
        todo = [(e, w) for e, w in pairs if w["id"] not in results]
        print(f"{len(pairs) - len(todo)} of {len(pairs)} workloads done before", flush=True)
        for index, (entry, workload) in enumerate(todo):
            left = budget - (time.monotonic() - start) - STOP_MARGIN
            if left < 5:
                print(f"stopped: the budget; {len(todo) - index} workloads left", flush=True)
                return 0
            limit = min(workload_seconds, left)
            # a workload cut short by the budget (not by its own limit) runs again next call,
            # once
            again = left < workload_seconds and workload["id"] not in retry
            code = _measure_and_write(entry, workload, cuda, limit, again, write)
            if code:
                return code
    print("done", flush=True)
    return 0


def _measure_and_write(
    entry: dict[str, Any],
    workload: dict[str, Any],
    cuda: bool,
    limit: float,
    again: bool,
    write: Any,
) -> int:
    """Measure one workload and write its row; non-zero where the call must end."""
    import torch

    before = _fresh_state(cuda)
    write({"id": workload["id"], "start": True})
    began = time.perf_counter()
    row: dict[str, Any] = {
        "id": workload["id"],
        "model": entry["id"],
        "source": entry["source"],
        "mode": workload["mode"],
        "batch_size": workload["batch_size"],
        "seq_len": workload["seq_len"],
        "precision": workload["precision"],
        "reserved_before": before,
    }
    cut_by_budget = False
    try:
        with _limit(limit):
            row.update(_one(entry, workload, cuda))
    except WorkloadTimeout as exc:
        cut_by_budget = again
        row["error"] = error_of(exc)
    except Exception as exc:
        row["error"] = error_of(exc)
        row["error"]["oom"] = isinstance(exc, torch.OutOfMemoryError)
    row["wall_seconds"] = round(time.perf_counter() - began, 2)
    poisoned = cuda and "error" in row and _poisoned()
    row["reserved_after"] = 0 if poisoned else _fresh_state(cuda)
    if cut_by_budget:  # not the workload's fault: run it again in the next call
        write({"id": workload["id"], "retry": "the call's budget ran out during it"})
        print(f"{workload['id']}: cut by the budget; the next call runs it again", flush=True)
        return 0
    write(row)
    _print(row)
    return 3 if poisoned else 0


def _print(row: dict[str, Any]) -> None:
    if "error" in row:
        state = f"ERROR {row['error']['type']}: {row['error']['message'][:100]}"
    elif "peak_reserved" in row:
        state = (
            f"allocated {row['peak_allocated'] / 2**30:7.3f} GiB  reserved "
            f"{row['peak_reserved'] / 2**30:7.3f} GiB"
        )
    else:
        state = f"ran, {row['step_seconds']:.2f} s a step"
    dirty = f"  reserved before {row['reserved_before']}" if row["reserved_before"] else ""
    print(f"{row['id']:55s} {row['wall_seconds']:6.1f} s  {state}{dirty}", flush=True)
