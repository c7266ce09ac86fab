"""The zoo sweep: memfit's estimate of every torchvision model, a model of every timm family and
a small model of every transformers type with a training head, against the GPU.

    python benchmarks/zoo.py list        # the models and each workload's batch -> models.json
    python benchmarks/zoo.py list --sources transformers --hf-types align dpt --out DIR
                                         # a few transformers types only (a held-out set)
    python benchmarks/zoo.py estimate    # memfit's estimates on this CPU -> estimates.jsonl
    python benchmarks/zoo.py measure --shard 1/4 --budget-seconds 560 --out FILE   # on a GPU
    python benchmarks/zoo.py measure --dry-run --out FILE    # the same loop on the CPU
    python benchmarks/zoo.py compare --measured FILE...      # -> compare.json

Each model has two workloads: training (bf16-mixed, AdamW, two steps) and inference (bf16, one
forward), each at the batch memfit's own estimate says fills 20-40% of an H100's memory. The
estimates are predictions: they are committed before the GPU measures them. ``list`` and
``estimate`` run in worker processes (``--workers``, 1 or 2), keep what they finish and start
where they stopped; ``measure`` does too, within a call's time (``--budget-seconds``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

RESULTS = Path(__file__).resolve().parent / "results" / "2026-12-06-cpu-zoo-sweep"
SOURCES = ("torchvision", "timm", "transformers")
WORK = Path("/tmp/memfit-zoo-work")  # what a run keeps to resume, and the workers' logs


def _quiet() -> None:
    """The libraries' warnings and progress off; no download, ever: the hub is not asked and
    a builder that would fetch weights (a torchvision backbone) fails instead."""
    import warnings

    import torch.hub

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore")

    def refuse(url: str, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"the zoo sweep builds models from code only; it does not fetch {url}")

    torch.hub.download_url_to_file = refuse  # type: ignore[assignment]


def _shard(text: str) -> tuple[int, int]:
    k, _, n = text.partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = (0, 0)
    if not 1 <= shard[0] <= shard[1]:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shard K/N with 1 <= K <= N")
    return shard


def _workers(text: str) -> int:
    count = int(text)
    if count not in (1, 2):
        raise argparse.ArgumentTypeError("--workers is 1 or 2 (this machine has 2 cores)")
    return count


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="the models and each workload's batch")
    listing.add_argument("--out", type=Path, default=RESULTS)
    listing.add_argument("--work", type=Path, default=WORK)
    listing.add_argument("--workers", type=_workers, default=1)
    listing.add_argument("--sources", nargs="+", choices=SOURCES, default=list(SOURCES))
    listing.add_argument(
        "--hf-types",
        nargs="+",
        default=None,
        help="only these transformers model types (a held-out set); default: every one",
    )
    estimate = sub.add_parser("estimate", help="memfit's estimate of every workload")
    estimate.add_argument("--models", type=Path, default=RESULTS / "models.json")
    estimate.add_argument("--out", type=Path, default=RESULTS / "estimates.jsonl")
    estimate.add_argument("--work", type=Path, default=WORK)
    estimate.add_argument("--workers", type=_workers, default=1)
    estimate.add_argument("--timeout", type=float, default=900.0, help="seconds per workload")
    estimate.add_argument(
        "--fresh",
        action="store_true",
        help="each workload in a fresh worker: nothing a library cached for another stays",
    )
    measure = sub.add_parser("measure", help="measure the workloads on this GPU")
    measure.add_argument("--models", type=Path, default=RESULTS / "models.json")
    measure.add_argument("--out", type=Path, required=True)
    measure.add_argument("--shard", type=_shard, default=(1, 1), help="K/N: the K-th of N")
    measure.add_argument("--budget-seconds", type=float, default=560.0)
    measure.add_argument("--workload-seconds", type=float, default=180.0)
    measure.add_argument("--dry-run", action="store_true", help="a few tiny models on the CPU")
    compare = sub.add_parser("compare", help="estimates against measurements")
    compare.add_argument("--models", type=Path, default=RESULTS / "models.json")
    compare.add_argument("--estimates", type=Path, default=RESULTS / "estimates.jsonl")
    compare.add_argument("--measured", type=Path, nargs="*", default=[])
    compare.add_argument(
        "--fresh",
        type=Path,
        nargs="*",
        default=[],
        help="zoo_history.py peaks: workloads measured again, each in a process of its own, "
        "which stand in for the sweep's measurement of them",
    )
    compare.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: beside the first measured file, else the results folder",
    )
    worker = sub.add_parser("worker", help=argparse.SUPPRESS)
    worker.add_argument("--answer-fd", type=int, required=True)
    return top


def _compare(args: argparse.Namespace) -> int:
    from zoo_compare import compare

    def rows(path: Path) -> list[dict]:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    models = json.loads(args.models.read_text())
    measured = [row for path in args.measured for row in rows(path)]
    measured += [{**row, "process": "fresh"} for path in args.fresh for row in rows(path)]
    result = compare(models, rows(args.estimates), measured)
    result["meta"] = {
        "models": str(args.models),
        "estimates": str(args.estimates),
        "measured": [str(p) for p in args.measured],
        "fresh": [str(p) for p in args.fresh],
    }
    out = args.out or (args.measured[0].parent if args.measured else RESULTS) / "compare.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"summary": result["summary"], "by_source": result["by_source"]}, indent=1))
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    _quiet()
    if args.command == "worker":
        import torch
        from zoo_pool import serve
        from zoo_run import handle_job

        torch.set_num_threads(1)
        return serve(args.answer_fd, handle_job)
    if args.command == "list":
        from zoo_run import run_list

        print(
            f"wrote {run_list(args.out, args.work, args.workers, set(args.sources), args.hf_types)}"
        )
        return 0
    if args.command == "estimate":
        from zoo_run import run_estimates

        run_estimates(args.models, args.out, args.work, args.workers, args.timeout, args.fresh)
        return 0
    if args.command == "measure":
        from zoo_measure import run_measure

        return run_measure(
            args.models,
            args.out,
            args.shard,
            args.budget_seconds,
            args.workload_seconds,
            dry_run=args.dry_run,
        )
    return _compare(args)


if __name__ == "__main__":
    raise SystemExit(main())
