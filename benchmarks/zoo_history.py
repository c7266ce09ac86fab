"""Record the caching allocator's history of zoo workloads on the GPU, for ``align.py``.

    PYTHONPATH=src python benchmarks/zoo_history.py OUT_DIR ID [ID ...] [--models MODELS.json]

``ID`` is a workload of the zoo sweep's ``models.json`` (``tv:fcn_resnet50/infer``), run at
the sweep's batch in memfit's own loop as ``zoo.py measure`` runs it, each in a process of its
own; its snapshot, frames stripped, goes to ``OUT_DIR/<ID with / and : as ->.pickle.gz``, and
the peaks to ``OUT_DIR/peaks.jsonl``. ``align.py zoo:ID FILE`` then compares the trace with it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODELS = Path(__file__).resolve().parent / "results" / "2026-12-06-cpu-zoo-sweep" / "models.json"


def zoo_workload(wid: str, models: Path = MODELS, gpu: Any = None) -> Any:
    """memfit's workload of the zoo sweep's ``wid`` (``MODEL/MODE``) at the sweep's batch."""
    from zoo_inputs import workload_for

    model, _, mode = wid.rpartition("/")
    entries = json.loads(models.read_text())["entries"]
    entry = next((e for e in entries if e["id"] == model), None)
    if entry is None or mode not in entry.get("workloads", {}):
        raise SystemExit(f"no zoo workload {wid!r} in {models}")
    return workload_for(entry, mode, entry["workloads"][mode]["batch_size"], gpu)


def file_name(wid: str) -> str:
    return wid.replace("/", "-").replace(":", "-") + ".pickle.gz"


def record(wid: str, out: Path, models: Path) -> dict[str, Any]:
    import torch
    from gpu_measure import _strip_frames

    from memfit.estimator import measure

    torch.manual_seed(0)
    measured, snapshot = measure(zoo_workload(wid, models), record_history=True)
    with gzip.open(out / file_name(wid), "wb") as fh:
        pickle.dump(_strip_frames(snapshot), fh)
    return {
        "id": wid,
        "peak_allocated": measured.peak_allocated,
        "peak_reserved": measured.peak_reserved,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("ids", nargs="+")
    parser.add_argument("--models", type=Path, default=MODELS)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per workload")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        print("RESULT " + json.dumps(record(args.ids[0], args.out, args.models)), flush=True)
        return 0
    for wid in args.ids:
        command = [sys.executable, __file__, str(args.out), wid, "--models", str(args.models)]
        try:
            done = subprocess.run(
                [*command, "--child"], capture_output=True, text=True, timeout=args.timeout
            )
        except subprocess.TimeoutExpired:
            row: dict[str, Any] = {"id": wid, "error": f"ran past {args.timeout:.0f} s"}
        else:
            lines = [s for s in done.stdout.splitlines() if s.startswith("RESULT ")]
            row = json.loads(lines[-1][7:]) if lines else {"id": wid, "error": done.stderr[-600:]}
        with (args.out / "peaks.jsonl").open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
