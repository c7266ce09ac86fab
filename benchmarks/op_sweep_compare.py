"""Compare one case's traced events with the GPU's, and sum the verdicts by op.

Each side is reduced to tokens in program order: ``+SIZE`` for an allocation (requested
bytes) and ``-SIZE`` for its free (the GPU's ``free_requested``). Identical token lists:
``matched``. Otherwise the first cause that applies, in this order: ``missing alloc`` (the
GPU allocated sizes the trace did not, none extra), ``extra alloc`` (the reverse), ``size
differs`` (as many allocations, some sizes differ; ``rounded`` added when they agree once
rounded to 512 bytes, as the allocator sees them), ``order differs`` (the same allocations
in another order), ``free timing differs`` (the same allocations in the same order, frees
elsewhere or missing). The detail names the differing sizes and the traced op that made them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

ROUND = 512


def rounded(size: int) -> int:
    return max(ROUND, (size + ROUND - 1) // ROUND * ROUND)


def tokens(events: list[list[Any]]) -> list[tuple[str, int]]:
    """``(+|-, size)`` per allocation and free; a free is its allocation's size."""
    live: dict[Any, int] = {}
    out = []
    for ev in events:
        kind, key, size = ev[0], ev[1], int(ev[2])
        if kind == "a":
            live[key] = size
            out.append(("+", size))
        elif kind == "f" and key in live:
            out.append(("-", live.pop(key)))
    return out


def peak(toks: list[tuple[str, int]]) -> int:
    """Peak of the live allocations' rounded bytes."""
    now = top = 0
    for sign, size in toks:
        now += rounded(size) if sign == "+" else -rounded(size)
        top = max(top, now)
    return top


def _labels(events: list[list[Any]]) -> dict[int, str]:
    return {int(e[2]): e[3] for e in events if e[0] == "a" and len(e) > 3}


def _sizes(sizes: Counter[int], labels: dict[int, str]) -> str:
    items = sorted(sizes.elements())[:4]
    return ", ".join(f"{s}" + (f" ({labels[s]})" if s in labels else "") for s in items)


def classify(real: list[list[Any]], traced: list[list[Any]]) -> tuple[str, str]:
    """``(verdict, detail)``: ``matched`` or ``mismatched`` with its cause (module doc)."""
    a, b = tokens(real), tokens(traced)
    if a == b:
        return "matched", ""
    labels = _labels(traced)
    allocs_a = [s for sign, s in a if sign == "+"]
    allocs_b = [s for sign, s in b if sign == "+"]
    more, fewer = Counter(allocs_a) - Counter(allocs_b), Counter(allocs_b) - Counter(allocs_a)
    if more and not fewer:
        return "mismatched", f"missing alloc: {_sizes(more, labels)}"
    if fewer and not more:
        return "mismatched", f"extra alloc: {_sizes(fewer, labels)}"
    if more and fewer:
        if len(allocs_a) != len(allocs_b):
            cause = "missing alloc" if len(allocs_a) > len(allocs_b) else "extra alloc"
            return "mismatched", (
                f"{cause}: gpu {_sizes(more, {})} vs traced {_sizes(fewer, labels)}"
            )
        same = sorted(map(rounded, allocs_a)) == sorted(map(rounded, allocs_b))
        cause = "size differs" + (" (rounded equal)" if same else "")
        return "mismatched", f"{cause}: gpu {_sizes(more, {})} vs traced {_sizes(fewer, labels)}"
    if allocs_a != allocs_b:
        return "mismatched", "order differs"
    return "mismatched", "free timing differs"


def compare_rows(real: dict[str, Any] | None, traced: dict[str, Any] | None) -> dict[str, Any]:
    """One case's verdict from its measured and traced rows (either may be missing)."""
    sides = ((real, "gpu"), (traced, "trace"))
    for row, side in sides:
        if row is None:
            return {"verdict": "missing", "detail": f"no {side} row"}
    for row, side in sides:  # a case either side cannot run is not sampled, errors or not
        if row["status"] == "not_sampled":
            return {"verdict": "not sampled", "detail": f"{side}: {row.get('reason', '')}"}
    for row, side in sides:
        if row["status"] == "error":
            return {"verdict": "error", "detail": f"{side}: {row.get('error', '')}"[:200]}
    assert real is not None and traced is not None
    if real.get("truncated"):
        return {"verdict": "error", "detail": "gpu: trace truncated (max_entries)"}
    verdict, detail = classify(real["events"], traced["events"])
    if verdict == "matched" and not tokens(real["events"]):
        detail = "no allocation"
    out = {
        "verdict": verdict,
        "detail": detail,
        "peak_gpu": peak(tokens(real["events"])),
        "peak_traced": peak(tokens(traced["events"])),
    }
    # the allocator's own peaks over the call (from the cache emptied, inputs held) against
    # the emulator's replay of the traced events (from nothing)
    for key in ("peak_allocated", "peak_reserved"):
        if key in real and key in traced:
            out[f"{key}_gpu"], out[f"{key}_traced"] = real[key], traced[key]
    if traced.get("small"):
        out["small"] = True
    return out


def summarize(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Counts per verdict, per cause, and per op (``op|variant``)."""
    by_op: dict[str, Counter[str]] = {}
    causes: Counter[str] = Counter()
    verdicts: Counter[str] = Counter()
    for cid, res in results.items():
        op = "|".join(cid.split("|")[:2])
        verdicts[res["verdict"]] += 1
        by_op.setdefault(op, Counter())[res["verdict"]] += 1
        if res["verdict"] == "mismatched":
            causes[res["detail"].split(":")[0]] += 1
    small = Counter(res["verdict"] for res in results.values() if res.get("small"))
    return {
        "verdicts": dict(verdicts),
        "small_verdicts": dict(small),
        "causes": dict(causes),
        "by_op": {op: dict(c) for op, c in sorted(by_op.items())},
    }


def markdown(results: dict[str, dict[str, Any]]) -> str:
    """A table by op: counts of each verdict and the first mismatch's cause."""
    summary = summarize(results)
    lines = [
        "| op | matched | mismatched | not sampled | error or missing | first mismatch |",
        "|---|---|---|---|---|---|",
    ]
    first: dict[str, str] = {}
    for cid, res in sorted(results.items()):
        op = "|".join(cid.split("|")[:2])
        if res["verdict"] in ("mismatched", "error") and op not in first:
            where = "|".join(cid.split("|")[2:])
            first[op] = f"{where}: {res['detail']}"[:120].replace("|", "/")
    for op, counts in summary["by_op"].items():
        name = op.rstrip("|").replace("|", ".")
        lines.append(
            f"| {name} | {counts.get('matched', 0)} | {counts.get('mismatched', 0)} | "
            f"{counts.get('not sampled', 0)} | {counts.get('error', 0) + counts.get('missing', 0)}"
            f" | {first.get(op, '')} |"
        )
    return "\n".join(lines) + "\n"
