"""The zoo sweep's CPU side: ``list`` (the models and the batch of each workload) and
``estimate`` (memfit's prediction of each workload), both in worker processes
(``zoo_pool.py``), both resumable: what is done is kept in files and not done again.

    run_list(results, work, workers=1)      # -> results/models.json
    run_estimates(models, out, work, workers=1, timeout=900)   # -> estimates.jsonl
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from zoo_inputs import MEMFIT_HF_TASKS, MODES, config_file, workload_for
from zoo_pool import Pool, error_of

__all__ = ["handle_job", "machine", "run_estimates", "run_list", "workloads_of"]

GPU = "h100"  # the target the batches are chosen for and the estimates made for
FALLBACK_BATCH = 8  # a workload memfit could not estimate is measured at this batch
ROOT = Path(__file__).resolve().parent.parent


# -- what a worker does -------------------------------------------------------------------------


def handle_job(job: dict[str, Any]) -> dict[str, Any]:
    """One job in a worker: an entry of a transformers type, a batch choice, or an estimate."""
    from memfit._gpus import resolve_gpu

    kind = job["kind"]
    if kind == "hf-entry":
        return _hf_entry(job["model_type"])
    gpu = resolve_gpu(GPU)
    if kind == "choose":
        from zoo_batch import choose

        _seed(job["entry"])
        return choose(job["entry"], job["mode"], gpu)
    if kind == "estimate":
        return _estimate(job["entry"], job["workload"], gpu)
    raise ValueError(f"unknown job {kind!r}")


def _seed(entry: dict[str, Any]) -> None:
    import torch

    torch.manual_seed(int(entry.get("seed", 0)))


def _hf_entry(model_type: str) -> dict[str, Any]:
    """The type's entry, and whether memfit's own ``hf:config.json`` takes its head: where
    memfit reads the head's architecture as another task, the sweep feeds the head itself."""
    from zoo_hf import head_of, hf_entry

    from memfit.workload import resolve_model

    head = head_of(model_type)
    assert head is not None
    entry = hf_entry(model_type, head)
    if "error" in entry:
        return entry
    entry["build"]["via"] = "sweep"
    main = entry["input"]["main"]
    if head.task == "image-classification" and main != "pixel_values":
        entry["memfit_recipe"] = f"memfit feeds images; {entry['head_class']} takes {main}"
    elif head.task in MEMFIT_HF_TASKS:
        try:
            recipe = resolve_model(f"hf:{config_file(entry)}")
        except Exception as exc:  # memfit refuses the config: noted, fed by the sweep
            entry["memfit_recipe"] = f"refused: {type(exc).__name__}: {exc}"[:500]
        else:
            if recipe.task == head.task:
                entry["build"]["via"] = "memfit"
            else:
                entry["memfit_recipe"] = (
                    f"memfit reads the architecture {entry['head_class']} as {recipe.task}"
                )
    return entry


def _estimate(entry: dict[str, Any], workload: dict[str, Any], gpu: Any) -> dict[str, Any]:
    import memfit

    _seed(entry)
    start = time.perf_counter()
    row: dict[str, Any] = {"id": workload["id"]}
    try:
        est = memfit.estimate(workload_for(entry, workload["mode"], workload["batch_size"], gpu))
    except Exception as exc:
        row["error"] = error_of(exc)
        row["seconds"] = round(time.perf_counter() - start, 3)
        return row
    row.update(
        peak_allocated=est.peak_allocated,
        peak_reserved=est.peak_reserved,
        seconds=round(time.perf_counter() - start, 3),
        notes=list(est.notes),
    )
    return row


# -- the machine and versions -------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """What ran the CPU side: host, CPU, cores, Python, the libraries and memfit's commit."""
    import timm
    import torch
    import torchvision
    import transformers

    import memfit

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    src = Path(memfit.__file__).resolve().parent
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "versions": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "transformers": transformers.__version__,
            "timm": timm.__version__,
        },
        "memfit": {"path": str(src), **_git_state(src)},
    }


def _git_state(src: Path) -> dict[str, Any]:
    def git(*args: str) -> str:  # trailing blanks only: a status line starts with one
        done = subprocess.run(["git", *args], cwd=src, capture_output=True, text=True)
        return done.stdout.rstrip()

    changed = [line[3:] for line in git("status", "--porcelain", "--", ".").splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "uncommitted": changed}


def _meta(command: str, workers: int) -> dict[str, Any]:
    return {
        "meta": {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command,
            "workers": workers,
            "gpu": GPU,
            **machine(),
        }
    }


# -- list ---------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(path: Path, row: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(row, default=str) + "\n")


def _entries(
    work: Path, pool: Pool, sources: set[str], only: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every entry: torchvision and timm made here, transformers types in the workers; kept in
    ``work/entries.jsonl`` so that a second run starts where the first stopped."""
    from zoo_catalog import timm_entries, torchvision_entries
    from zoo_hf import hf_types

    path = work / "entries.jsonl"
    done = {e["id"]: e for e in _read_jsonl(path)}
    if "torchvision" in sources and not any(i.startswith("tv:") for i in done):
        for entry in torchvision_entries():
            _append(path, entry)
            done[entry["id"]] = entry
        print(f"torchvision: {sum(i.startswith('tv:') for i in done)} models", flush=True)
    if "timm" in sources and not any(i.startswith("timm:") for i in done):
        for entry in timm_entries():
            _append(path, entry)
            done[entry["id"]] = entry
        print(f"timm: {sum(i.startswith('timm:') for i in done)} families", flush=True)
    if "transformers" in sources:
        types = [
            t
            for t, head in hf_types()
            if head is not None and f"hf:{t}" not in done and (only is None or t in only)
        ]
        jobs = [{"kind": "hf-entry", "model_type": t} for t in types]

        def keep(job: dict[str, Any], entry: dict[str, Any]) -> None:
            if "id" not in entry:  # the worker failed with the job (timeout, crash)
                entry = {"id": f"hf:{job['model_type']}", "source": "transformers", **entry}
            _append(path, entry)
            done[entry["id"]] = entry
            state = entry.get("error", {}).get("message") or entry.get("shrink")
            print(f"hf {job['model_type']:34s} {str(state)[:110]}", flush=True)

        pool.run(jobs, keep)
    return [e for e in done.values() if e["source"] in sources]


def workloads_of(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The entry's workloads as ``models.json`` lists them (none for an entry in error)."""
    return list(entry.get("workloads", {}).values())


def run_list(
    results: Path, work: Path, workers: int, sources: set[str], hf_only: list[str] | None = None
) -> Path:
    """Build every entry (of the transformers types ``hf_only`` only, when given), choose each
    workload's batch, write ``results/models.json``."""
    work.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    pool = Pool(workers, timeout=900, log=work / "workers.log")
    entries = _entries(work, pool, sources, hf_only)
    path = work / "choices.jsonl"
    choices = {c["id"]: c for c in _read_jsonl(path)}
    jobs = [
        {"kind": "choose", "entry": e, "mode": mode, "id": f"{e['id']}/{mode}"}
        for e in entries
        if "error" not in e
        for mode in MODES
        if f"{e['id']}/{mode}" not in choices
    ]
    print(f"choosing the batch of {len(jobs)} workloads", flush=True)
    started = time.monotonic()

    def keep(job: dict[str, Any], choice: dict[str, Any]) -> None:
        choice = {"id": job["id"], **choice}
        _append(path, choice)
        choices[job["id"]] = choice
        state = (
            f"error {choice['error']['type']}"
            if "error" in choice
            else f"batch {choice['batch_size']:5d} {choice['fraction']:.0%} {choice['why']}"
        )
        print(
            f"[{len(choices)}, {time.monotonic() - started:.0f} s] {job['id']:55s} {state}",
            flush=True,
        )

    pool.run(jobs, keep)
    for entry in entries:
        if "error" in entry:
            continue
        entry["workloads"] = {
            mode: _workload(entry, mode, choices[f"{entry['id']}/{mode}"]) for mode in MODES
        }
    out = results / "models.json"
    meta = _meta(" ".join(["python", *sys.argv]), workers)["meta"]
    if "transformers" in sources:
        from zoo_hf import HEADS, hf_types

        heads = ", ".join(head.auto for head in HEADS)
        meta["transformers_types_without_a_head"] = {
            "why": f"none of the sweep's heads takes them ({heads})",
            "types": [t for t, head in hf_types() if head is None],
        }
    out.write_text(json.dumps({"meta": meta, "entries": entries}, indent=1, default=str) + "\n")
    return out


def _workload(entry: dict[str, Any], mode: str, choice: dict[str, Any]) -> dict[str, Any]:
    spec = entry.get("input", {})
    choice = {k: v for k, v in choice.items() if k != "id"}
    batch = choice.get("batch_size") or FALLBACK_BATCH
    return {
        "id": f"{entry['id']}/{mode}",
        **MODES[mode],
        "batch_size": batch,
        "seq_len": spec.get("seq_len") if spec.get("main") == "input_ids" else None,
        "steps": 2 if mode == "train" else 1,
        "batch_from": "fallback" if "error" in choice else "estimate",
        "chosen_by": choice,
    }


# -- estimate -----------------------------------------------------------------------------------


def run_estimates(
    models: Path, out: Path, work: Path, workers: int, timeout: float, fresh: bool = False
) -> None:
    """memfit's estimate of every workload not yet in ``out``, appended as it comes; with
    ``fresh``, each in a worker of its own (transformers' RT-DETR family keeps its anchors in a
    cache keyed by dtype across calls, which a traced training step fills with float32 anchors
    under the bfloat16 key: a bf16 inference traced after it in the same process fails)."""
    data = json.loads(models.read_text())
    done = {r["id"] for r in _read_jsonl(out) if "id" in r}
    jobs = [
        {"kind": "estimate", "entry": e, "workload": w, "id": w["id"]}
        for e in data["entries"]
        for w in workloads_of(e)
        if w["id"] not in done
    ]
    total = len(done) + len(jobs)
    print(f"{len(done)} of {total} workloads estimated before; {len(jobs)} to go", flush=True)
    if not jobs:
        return
    _append(out, _meta(" ".join(["python", *sys.argv]), workers))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "estimate-workers.log"
    pool = (
        Pool(workers, timeout=timeout, log=log, recycle=1) if fresh else Pool(workers, timeout, log)
    )
    started = time.monotonic()
    count = len(done)

    def keep(job: dict[str, Any], row: dict[str, Any]) -> None:
        nonlocal count
        count += 1
        workload = job["workload"]
        row = {
            "id": job["id"],
            "model": job["entry"]["id"],
            "source": job["entry"]["source"],
            "mode": workload["mode"],
            "batch_size": workload["batch_size"],
            "seq_len": workload["seq_len"],
            "precision": workload["precision"],
            **{k: v for k, v in row.items() if k != "id"},
        }
        _append(out, row)
        state = (
            f"error {row['error']['type']}: {row['error']['message'][:60]}"
            if "error" in row
            else f"{row['peak_reserved'] / 2**30:7.2f} GiB reserved"
        )
        print(
            f"[{count}/{total}, {time.monotonic() - started:.0f} s] {job['id']:50s} "
            f"{row.get('seconds', 0):6.1f} s  {state}",
            flush=True,
        )

    pool.run(jobs, keep)
