"""Every op PyTorch's OpInfo database samples, forward and backward in fp32, bf16 and fp16:
the allocations memfit traces for one call against those the GPU's caching allocator makes.

    PYTHONPATH=src python benchmarks/op_sweep.py trace OUT.jsonl [--budget-s 1200]
    PYTHONPATH=src python benchmarks/op_sweep.py measure OUT.jsonl [--budget-s 1500] [--dry-run]
    python benchmarks/op_sweep.py compare MEASURED.jsonl TRACED.jsonl --out DIR

Common options: ``--ops NAME ...`` (OpInfo names), ``--limit N`` (the first N OpInfos),
``--shard I/N`` (every N-th OpInfo from the I-th: processes side by side, each with its own
file), ``--dtypes``, ``--directions``, ``--per-op`` (samples per op and dtype, default 2).

A case is ``op|variant|dtype|direction|sample_index`` (``op_sweep_cases.py``: which samples,
scaled up to at least 1 MiB of inputs, and how one call runs). ``trace`` records memfit's
events on meta tensors (no GPU); ``measure`` records the real allocator's on the GPU, in one
process, each case caught on its own (an error is a row; a CUDA error that breaks the context
ends the run after its row), with a first row naming the GPU and versions; ``--dry-run`` runs
the same loop on the CPU with nothing recorded. Both append one JSON line per case as it ends
and skip the cases (and whole op-dtype groups) already in the file, so a run cut by its
``--budget-s`` (seconds) resumes where it stopped; ``--case-timeout`` (seconds) ends a case
that runs too long (between Python operations). A group (op and dtype) a former run started and
never ended (the process aborted or was killed in it) is written as an error and not run again.
``compare`` classifies each case (``op_sweep_compare.py``) and writes ``summary.json`` and
``table.md``. Rows marked ``small`` are samples below 1 MiB (ops whose samples no factor grows).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import op_sweep_cases as cases
from op_sweep_compare import compare_rows, markdown, summarize

DIRECTIONS = ("forward", "backward")


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            with contextlib.suppress(json.JSONDecodeError):  # a line cut by a kill
                rows.append(json.loads(line))
    return rows


def selected_ops(args: argparse.Namespace) -> list[Any]:
    ops = cases.op_db()
    if args.ops:
        ops = [op for op in ops if op.name in set(args.ops)]
    if args.limit:
        ops = ops[: args.limit]
    i, n = (int(x) for x in args.shard.split("/"))
    return ops[i::n]


class _CaseTimeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """SIGALRM ends a case that runs longer than ``seconds`` (checked between Python ops)."""

    def fire(signum: int, frame: Any) -> None:
        raise _CaseTimeout(f"over {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _row(cid: str, status: str, **extra: Any) -> dict[str, Any]:
    op, variant, dtype, direction, sample = cid.split("|")
    return {
        "id": cid,
        "op": op,
        "variant": variant,
        "dtype": dtype,
        "direction": direction,
        "sample": sample,
        "status": status,
        **extra,
    }


def _group_rows(
    op: Any, dname: str, args: argparse.Namespace, side: Callable[..., dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """The rows of one op and dtype: not sampled, or one per direction and chosen sample."""
    key, dtype = cases.op_key(op), cases.DTYPES[dname]
    try:
        choice = cases.choose(op, dtype, args.per_op)
    except Exception as exc:
        choice = cases.Choice(reason=f"choosing samples failed: {type(exc).__name__}: {exc}")
    for direction in args.directions:
        if args.cmd == "measure":
            reason = cases.cuda_reason(op, dtype, direction)
        else:  # CUDA or CPU: OpInfo's CUDA dtypes here lack those it decides by the GPU
            known = op.supported_dtypes("cuda") | op.supported_dtypes("cpu")
            reason = "" if dtype in known else "dtype not supported by the op"
        reason = reason or choice.reason
        if not reason and direction == "backward" and not op.supports_autograd:
            reason = "no backward (supports_autograd is False)"
        if reason:
            yield _row(f"{key}|{dname}|{direction}|-", "not_sampled", reason=reason[:300])
            continue
        grad = direction == "backward"
        try:
            found = cases.chosen(op, dtype, choice.k, grad, choice.indices)
        except Exception as exc:
            yield _row(f"{key}|{dname}|{direction}|-", "error", error=_err(exc), side="samples")
            continue
        for i in choice.indices:
            yield _case_row(op, f"{key}|{dname}|{direction}|{i}", found, i, choice, side, args)


def _case_row(
    op: Any,
    cid: str,
    found: dict[int, Any],
    i: int,
    choice: cases.Choice,
    side: Callable[..., dict[str, Any]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    if i not in found:
        return _row(cid, "error", error="fewer samples on the CPU than on meta", side="samples")
    (sample, on_cpu), direction = found[i], cid.split("|")[3]
    extra = {"k": choice.k, "input_bytes": cases.input_bytes(sample)}
    if choice.small:
        extra["small"] = True
    start = time.perf_counter()
    try:
        with _time_limit(args.case_timeout):
            result = side(op, sample, direction, on_cpu)
    except cases.NotSampled as exc:
        return _row(cid, "not_sampled", reason=str(exc), **extra)
    except Exception as exc:
        return _row(cid, "error", error=_err(exc), seconds=_since(start), **extra)
    return _row(cid, "ok", seconds=_since(start), **extra, **result)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:400]


def _since(start: float) -> float:
    return round(time.perf_counter() - start, 4)


def sweep(args: argparse.Namespace, side: Callable[..., dict[str, Any]], head: dict) -> int:
    """Run ``side`` on every case not yet in ``args.out``, within ``args.budget_s``."""
    out = Path(args.out)
    old = read_rows(out)
    done = {r["id"] for r in old}
    if old:  # a run that stopped, or a stale file whose rows would stand for this code's
        earlier = [r for r in old if r["id"] == "meta"]
        when = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(earlier[0]["started"]))
            if earlier
            else "?"
        )
        print(f"resuming {out}: {len(done)} rows there, first started {when}", file=sys.stderr)
    start = time.perf_counter()
    written = 0
    with out.open("a") as f:
        f.write(json.dumps({"id": "meta", **head, "started": time.time()}) + "\n")
        for op in selected_ops(args):
            for dname in args.dtypes:
                group = f"{cases.op_key(op)}|{dname}|*|*"
                if group in done:
                    continue
                if time.perf_counter() - start > args.budget_s:
                    print(f"budget spent: {written} cases written", file=sys.stderr)
                    return written
                began = f"{cases.op_key(op)}|{dname}|*|started"
                rows = (
                    _died_in(group, args) if began in done else _group_rows(op, dname, args, side)
                )
                if began not in done:
                    f.write(json.dumps({"id": began, "status": "group"}) + "\n")
                    f.flush()
                for row in rows:
                    if row["id"] in done:
                        continue
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    written += 1
                    if _context_broken(row):
                        print(f"CUDA context broken at {row['id']}: stopping", file=sys.stderr)
                        return written
                f.write(json.dumps({"id": group, "status": "group"}) + "\n")
                f.flush()
    print(f"{written} cases in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return written


def _died_in(group: str, args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """Rows for a group a former run started and never ended: the process died in it (a
    crash in native code), so it is not run again."""
    key = group.removesuffix("|*|*")
    for direction in args.directions:
        cid = f"{key}|{direction}|-"
        yield _row(cid, "error", error="the process died in this op and dtype", side="process")


def _context_broken(row: dict[str, Any]) -> bool:
    error = row.get("error", "")
    return row["status"] == "error" and ("CUDA error" in error or "illegal memory" in error)


def trace_side(args: argparse.Namespace) -> Callable[..., dict[str, Any]]:
    from op_sweep_sides import trace_case

    return lambda op, sample, direction, on_cpu: trace_case(op, sample, direction, on_cpu, args.gpu)


def measure_side(args: argparse.Namespace) -> Callable[..., dict[str, Any]]:
    from op_sweep_sides import DryRecorder, GpuRecorder, measure_case

    recorder = DryRecorder() if args.dry_run else GpuRecorder()
    return lambda op, sample, direction, on_cpu: measure_case(
        op, sample, direction, on_cpu, recorder
    )


def _measured_rows(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """The GPU's rows by case; a later file that measures an op and dtype again (``meshgrid``
    with the hash seed pinned) replaces that group's rows of the files before it."""
    real: dict[str, dict[str, Any]] = {}
    for path in paths:
        rows = [r for r in read_rows(path) if "status" in r]
        again = {r["id"].rsplit("|", 2)[0] for r in rows if r["id"].endswith("|*|started")}
        real = {cid: r for cid, r in real.items() if cid.rsplit("|", 2)[0] not in again}
        real.update((r["id"], r) for r in rows)
    return real


def compare(measured: list[Path], traced: list[Path], out: Path) -> dict[str, Any]:
    """Classify every case found on either side; write ``summary.json`` and ``table.md``."""
    real = _measured_rows(measured)
    mine = {r["id"]: r for p in traced for r in read_rows(p) if "status" in r}
    results = {}
    traced_groups = {cid.rpartition("|")[0] for cid in mine}
    for cid in sorted(set(real) | set(mine)):
        group, _, sample = cid.rpartition("|")
        if cid.startswith("meta") or "|*|" in cid:
            continue
        if sample == "-" and cid not in mine and group in traced_groups:
            continue  # the GPU refused a group the trace sampled: its samples say so
        # a sample of a group the GPU refused as a whole (a dtype it lacks) takes its row
        gpu_row = real.get(cid) or real.get(f"{group}|-")
        results[cid] = compare_rows(gpu_row, mine.get(cid))
    metas = [r for p in measured for r in read_rows(p) if r.get("id") == "meta"]
    summary = {"gpu": metas[-1] if metas else None, **summarize(results), "cases": results}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "table.md").write_text(markdown(results))
    return summary


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("trace", "measure"):
        s = sub.add_parser(name)
        s.add_argument("out")
        s.add_argument("--budget-s", type=float, default=1200.0)
        s.add_argument("--case-timeout", type=int, default=60)
        s.add_argument("--ops", nargs="*", default=[])
        s.add_argument("--limit", type=int, default=0)
        s.add_argument("--shard", default="0/1")
        s.add_argument("--dtypes", nargs="*", default=list(cases.DTYPES))
        s.add_argument("--directions", nargs="*", default=list(DIRECTIONS))
        s.add_argument("--per-op", type=int, default=2)
        if name == "trace":
            s.add_argument("--gpu", default="h100", help="the GPU traced for (its sm)")
        else:
            s.add_argument("--dry-run", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("--measured", nargs="+", type=Path, required=True)
    c.add_argument("--traced", nargs="+", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    return p


# OpInfo's sample generators iterate in hash order for some ops (``meshgrid``'s shapes): both
# sides draw the same samples only under the same hash seed
HASH_SEED = "0"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd != "compare" and os.environ.get("PYTHONHASHSEED") != HASH_SEED and argv is None:
        env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    if args.cmd == "compare":
        summary = compare(args.measured, args.traced, args.out)
        print(json.dumps({"verdicts": summary["verdicts"], "causes": summary["causes"]}))
        return 0
    import torch

    if args.cmd == "trace":
        head = {"side": "trace", "torch": torch.__version__, "gpu": args.gpu}
        sweep(args, trace_side(args), head)
    else:
        from op_sweep_sides import gpu_meta

        sweep(args, measure_side(args), {"side": "measure", **gpu_meta(args.dry_run)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
