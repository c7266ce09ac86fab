"""Align a workload's traced allocations with a real allocator trace; print the first differences.

    PYTHONPATH=src python benchmarks/align.py ID TRACE.pickle.gz [--min-mib 1] [--show 8]
        [--context 6] [--from-step] [--dump FILE]

``ID`` is a workload of ``benchmarks/workloads.py``, ``zoo:MODEL/MODE`` (a workload of the
zoo sweep, recorded by ``zoo_history.py``), or ``plan:PLANS.json:MODEL@BUDGET:STEPS``, the
chosen plan of ``plan_proof.py``'s row run for STEPS steps through memfit's loop, as
``plan_proof.py measure --history`` records it (``loop-*.pickle.gz``); ``TRACE`` is the
snapshot that ``gpu_measure.py --traces`` saved for it (``torch.cuda.memory._snapshot()``,
gzipped or not).
Both sequences are reduced to the allocations of at least ``--min-mib`` MiB and their frees,
each written as ``+SIZE`` / ``-SIZE`` (the bytes requested, before the allocator rounds
them; ``--round`` compares them rounded to 512 bytes, as the allocator sees them), and aligned
with difflib. Printed: the counts, the
peaks (real: allocated and reserved from the trace; traced: the emulator's replay), then the
first ``--show`` blocks that differ, each with ``--context`` matching events before it and the
traced events' op, module and phase. Why: gaps are closed by finding the first systematic
difference between what the GPU allocated and what the trace did (benchmarks/results/README.md),
not by fitting factors. ``--from-step`` drops the setup (model and optimizer built) from both
sides (the real setup is taken to be as many large allocations as the traced one's);
``--dump`` writes both reduced sequences side by side (tab-separated) for a closer look.

``--conv-workspaces FILE`` answers another question with the same alignment: for each
convolution the cuDNN table (memfit/trace/data) does not know, what workspace the GPU took in
each phase (fwd, dgrad, wgrad). The trace gives every such lookup a unique marker size; the
real allocation aligned with a marker is that workspace (none aligned: 0). Written as JSON,
``{"KEY|PHASE|BATCH": {"SIZE": calls}}`` with the table's keys; one size per key and phase
means every call agreed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import ALL, estimate_kwargs, recipe_for

_ROUND = 512


@dataclass(frozen=True)
class Ev:
    """One reduced event: ``+size`` (alloc) or ``-size`` (free), with where it came from."""

    sign: str
    size: int
    where: str = ""

    @property
    def token(self) -> str:
        return f"{self.sign}{self.size}"


def _rounded(size: int) -> int:
    return max(_ROUND, (size + _ROUND - 1) // _ROUND * _ROUND)


def _reduce(events: list[tuple[str, int, int, str]], min_bytes: int) -> list[Ev]:
    """Keep the allocations of at least ``min_bytes`` and the frees of those blocks."""
    live: dict[int, int] = {}
    out = []
    for kind, block, size, where in events:
        if kind == "alloc":
            if size >= min_bytes:
                live[block] = size
                out.append(Ev("+", size, where))
        elif block in live:
            out.append(Ev("-", live.pop(block), where))
    return out


def real_events(path: Path) -> tuple[list[tuple[str, int, int, str]], int, int]:
    """The real trace's (kind, address, size, "") events, with its peak allocated and reserved."""
    import memfit.snapshot

    snap = memfit.snapshot.load(path)
    evs = [(e.kind, e.block, e.size, "") for e in snap.events()]
    rep = memfit.snapshot.report(snap)
    return evs, rep.peak_allocated, rep.peak_reserved


def traced_events(
    workload_id: str, models: Path | None = None
) -> tuple[list[tuple[str, int, int, str]], int, int, int]:
    """The trace's (kind, block, rounded size, op@module/phase) events, peaks, first step index."""
    from memfit._gpus import resolve_gpu
    from memfit.allocator import AllocatorReplay
    from memfit.estimator._pressure import replay_ops
    from memfit.trace import trace_workload
    from memfit.workload import make_workload

    gpu = resolve_gpu("h200")
    entry: dict = {}
    if workload_id.startswith("parallelize_gpu:"):  # a case of parallelize_gpu.py
        import parallelize_gpu

        workload = parallelize_gpu._workload(workload_id.partition(":")[2])
    elif workload_id.startswith("plan:"):
        workload, entry = _plan_workload(workload_id)
    elif workload_id.startswith("zoo:"):  # a workload of the zoo sweep (zoo_history.py)
        from zoo_history import MODELS, zoo_workload

        workload = zoo_workload(workload_id.removeprefix("zoo:"), models or MODELS, gpu=gpu)
    else:
        found = next((e for e in ALL if e["id"] == workload_id), None)
        if found is None:
            raise SystemExit(f"unknown workload id {workload_id!r}: see benchmarks/workloads.py")
        entry = found
        workload = make_workload(
            recipe_for(entry),
            allocator_config=entry.get("allocator_config", ""),
            gpu=gpu,
            **estimate_kwargs(entry),
        )
    tr = trace_workload(workload, gpu)
    out = []
    for ev in tr.events:
        where = ""
        if ev.info is not None:
            info = tr.infos[ev.info]
            where = f"{info.op} @{info.module} [{info.phase}] {info.dtype}{list(info.shape)}"
        out.append((ev.kind, ev.block, ev.size, where))
    rep = AllocatorReplay(entry.get("allocator_config", ""))
    rep.run(replay_ops(tr))  # as the estimate replays it
    return out, rep.peak_allocated, rep.peak_reserved, tr.steps_start


def _plan_workload(spec: str) -> tuple[Any, dict]:
    """``plan:PLANS.json:MODEL@BUDGET:STEPS``: the plan's step as ``plan_proof.py``'s loop runs
    it, and its allocator setting (as ``entry["allocator_config"]``)."""
    import plan_proof

    from memfit.workload import make_workload

    _, path, which, steps = spec.split(":", 3)
    row = plan_proof.chosen_row(Path(path), which)
    model, chosen = row["model"], row["plan"]["chosen"]
    settings = plan_proof._settings(row, chosen)
    alloc = chosen["allocator_config"]
    workload = make_workload(
        model, steps=int(steps), gpu="h200", allocator_config=alloc, **settings
    )
    return workload, {"allocator_config": alloc}


def _after_allocs(
    events: list[tuple[str, int, int, str]], n: int, min_bytes: int
) -> list[tuple[str, int, int, str]]:
    """The events after the ``n``-th allocation of at least ``min_bytes``, less their frees."""
    seen = 0
    for i, (kind, _, size, _) in enumerate(events):
        if kind == "alloc" and size >= min_bytes:
            seen += 1
            if seen == n:
                before = {b for k, b, _, _ in events[: i + 1] if k == "alloc"}
                return [e for e in events[i + 1 :] if e[1] not in before]
    return events


_MARK = 3 * 10**9  # larger than any workspace; unique per (key, phase, batch), 512 apart


def _mark_unknown_convolutions() -> dict[int, tuple[str, str, int]]:
    """Make the trace's misses in the cuDNN table allocate marker sizes; returns marker -> key."""
    from memfit.trace import _cudnn

    marks: dict[int, tuple[str, str, int]] = {}
    sizes: dict[tuple[str, str, int], int] = {}
    original = _cudnn.ConvWorkspaces._lookup

    def lookup(self: Any, shape: tuple[Any, ...], groups: int, phases: list[str]) -> Any:
        out = original(self, shape, groups, phases)
        x, weight, stride, padding, dilation, transposed, out_pad = shape
        key = _cudnn._key(x, weight, stride, padding, groups, dilation, transposed, out_pad)
        if key is None or _cudnn._table(self.table).get(key) is not None:
            return out
        marked = []
        for phase in phases:
            which = (key, phase, int(x.shape[0]))
            if which not in sizes:
                sizes[which] = _MARK + 512 * len(sizes)
                marks[sizes[which]] = which
            marked.append(sizes[which])
        return marked

    _cudnn.ConvWorkspaces._lookup = lookup
    return marks


def _conv_workspaces(
    a: list[Ev], b: list[Ev], marks: dict[int, tuple[str, str, int]]
) -> dict[str, dict[str, int]]:
    """The real allocation aligned with each marker (0 where none is), counted per key."""
    matcher = difflib.SequenceMatcher(None, [e.token for e in a], [e.token for e in b], False)
    found: dict[str, dict[str, int]] = {}
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        markers = [b[k].size for k in range(j1, j2) if b[k].sign == "+" and b[k].size in marks]
        real = [a[k].size for k in range(i1, i2) if a[k].sign == "+"]
        for n, marker in enumerate(markers if tag != "equal" else []):
            key, phase, batch = marks[marker]
            size = str(real[n] if n < len(real) else 0)
            counts = found.setdefault(f"{key}|{phase}|{batch}", {})
            counts[size] = counts.get(size, 0) + 1
    return dict(sorted(found.items()))


def _replayed_reserved(path: Path) -> int:
    """The real trace's peak reserved as the emulator gets it with its default address model.

    Equal to the real peak: the difference is in the sequence; different: (also) where the
    driver placed segments, which no estimate can know (benchmarks/results/README.md).
    """
    import memfit.snapshot
    from memfit.snapshot._replay import build_ops, run_replay
    from memfit.snapshot._timeline import trace_timeline

    snap = memfit.snapshot.load(path)  # with the trace's empty_cache calls where it shows them
    return run_replay(build_ops(trace_timeline(snap)), snap.config).peak_reserved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload")
    parser.add_argument("trace", type=Path)
    parser.add_argument("--min-mib", type=float, default=1.0)
    parser.add_argument("--show", type=int, default=8)
    parser.add_argument("--context", type=int, default=6)
    parser.add_argument("--from-step", action="store_true")
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--round", action="store_true", help="compare sizes rounded to 512 B")
    parser.add_argument("--conv-workspaces", type=Path, metavar="FILE")
    parser.add_argument(
        "--models", type=Path, help="the zoo's models.json of a zoo: workload (default the sweep's)"
    )
    args = parser.parse_args()
    min_bytes = int(args.min_mib * 2**20)

    marks = _mark_unknown_convolutions() if args.conv_workspaces else {}
    real, r_alloc, r_res = real_events(args.trace)
    traced, t_alloc, t_res, steps_start = traced_events(args.workload, args.models)
    if args.from_step:  # both sides from the first allocation after the setup's
        setup_blocks = {b for k, b, _, _ in traced[:steps_start] if k == "alloc"}
        n_setup = sum(1 for k, _, s, _ in traced[:steps_start] if k == "alloc" and s >= min_bytes)
        traced = [e for e in traced[steps_start:] if e[1] not in setup_blocks]
        real = _after_allocs(real, n_setup, min_bytes)
    if args.round:
        real = [(k, blk, _rounded(s), w) for k, blk, s, w in real]
        traced = [(k, blk, _rounded(s), w) for k, blk, s, w in traced]
    a = _reduce(real, min_bytes)
    b = _reduce(traced, min_bytes)
    print(
        f"real:   {len(a)} events >= {args.min_mib} MiB; "
        f"peak allocated {r_alloc:,} reserved {r_res:,}"
    )
    print(
        f"traced: {len(b)} events >= {args.min_mib} MiB; "
        f"peak allocated {t_alloc:,} reserved {t_res:,} (replayed, setup included)"
    )
    print(
        f"        allocated {t_alloc - r_alloc:+,} ({(t_alloc / r_alloc - 1) * 100:+.3f}%), "
        f"reserved {t_res - r_res:+,} ({(t_res / r_res - 1) * 100:+.3f}%)"
    )
    print(
        "        the real trace replayed without its addresses (the estimate's address model): "
        f"peak reserved {_replayed_reserved(args.trace):,}"
    )
    matcher = difflib.SequenceMatcher(
        None, [e.token for e in a], [e.token for e in b], autojunk=False
    )
    shown = 0
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        shown += 1
        if shown > args.show:
            break
        print(f"\n--- {tag}: real[{i1}:{i2}] vs traced[{j1}:{j2}]")
        for k in range(max(0, j1 - args.context), j1):
            print(f"    = {b[k].token:>14}  {b[k].where}")
        for k in range(i1, i2):
            print(f"  R {a[k].token:>14}")
        for k in range(j1, j2):
            print(f"  T {b[k].token:>14}  {b[k].where}")
    if args.conv_workspaces is not None:
        found = _conv_workspaces(a, b, marks)
        args.conv_workspaces.write_text(json.dumps(found, indent=1) + "\n")
        print(f"\n{len(found)} unknown convolution phases -> {args.conv_workspaces}")
    if args.dump is not None:
        with args.dump.open("w") as fh:
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                for k in range(max(i2 - i1, j2 - j1)):
                    ra = a[i1 + k].token if i1 + k < i2 else ""
                    tb = b[j1 + k] if j1 + k < j2 else None
                    fh.write(f"{tag}\t{ra}\t{tb.token if tb else ''}\t{tb.where if tb else ''}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
