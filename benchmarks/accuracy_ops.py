"""The "Op sweep" section of docs/accuracy.md: ``benchmarks/op_sweep.py compare``'s
``summary.json``, read from the source ``accuracy_page.py`` declares with the reader below: how
many (op, dtype, direction, sample) cases allocate the same sequence as the GPU, by dtype and
direction, the causes of the others, and the ops with the most cases left.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from accuracy_formats import Read, Source

__all__ = ["OpSweepFile", "op_sweep_section", "op_sweep_summary"]

WORST = 25  # ops listed with the most cases that do not match


@dataclass(frozen=True)
class OpSweepFile:
    """One ``summary.json``: the GPU's meta row and every case's verdict."""

    data: dict[str, Any]


def op_sweep_summary(data: Any, src: Source) -> list[OpSweepFile]:
    """``op_sweep.py compare``'s ``summary.json``."""
    return [OpSweepFile(data)]


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.1f}%)" if whole else "-"


def _by_kind(cases: dict[str, dict[str, Any]]) -> list[str]:
    """Matched of compared (matched or mismatched) per dtype and direction."""
    lines = ["| dtype | forward | backward |", "| --- | ---: | ---: |"]
    counts: dict[tuple[str, str], Counter[str]] = {}
    for cid, case in cases.items():
        _, _, dtype, direction, _ = cid.split("|")
        counts.setdefault((dtype, direction), Counter())[case["verdict"]] += 1
    for dtype in ("fp32", "bf16", "fp16"):
        cells = []
        for direction in ("forward", "backward"):
            c = counts.get((dtype, direction), Counter())
            cells.append(_share(c["matched"], c["matched"] + c["mismatched"]))
        lines.append(f"| {dtype} | {' | '.join(cells)} |")
    return lines


def _worst(cases: dict[str, dict[str, Any]]) -> list[str]:
    by_op: dict[str, Counter[str]] = {}
    first: dict[str, str] = {}
    for cid, case in sorted(cases.items()):
        op = ".".join(p for p in cid.split("|")[:2] if p)
        by_op.setdefault(op, Counter())[case["verdict"]] += 1
        if case["verdict"] == "mismatched" and op not in first:
            where = "/".join(cid.split("|")[2:])
            first[op] = f"{where}: {case['detail']}"[:110].replace("|", "/")
    ranked = sorted(by_op.items(), key=lambda kv: -kv[1]["mismatched"])
    lines = ["| op | matched | mismatched | first mismatch |", "| --- | ---: | ---: | --- |"]
    for op, c in ranked[:WORST]:
        if not c["mismatched"]:
            break
        lines.append(f"| {op} | {c['matched']} | {c['mismatched']} | {first.get(op, '')} |")
    return lines


def op_sweep_section(read: Read, title: str) -> list[str]:
    """The section's lines (none where no summary is declared)."""
    found = list(read.of(OpSweepFile))
    if not found:
        return []
    record, src = found[-1]
    summary = record.data
    cases = summary["cases"]
    verdicts = Counter(c["verdict"] for c in cases.values())
    compared = verdicts["matched"] + verdicts["mismatched"]
    gpu = summary.get("gpu") or {}
    causes = Counter(
        c["detail"].split(":")[0] for c in cases.values() if c["verdict"] == "mismatched"
    )
    return [
        f"## {title}",
        "",
        "Every op of PyTorch's OpInfo database (`benchmarks/op_sweep.py`), forward and backward "
        "in fp32, bf16 and fp16, at samples of 1 MiB or more where a sample grows: the "
        "allocations memfit traces for one call against those the caching allocator made "
        f"({gpu.get('gpu', 'GPU')}, torch {gpu.get('torch', '?')}). A case matches when "
        "both allocate and free the same sizes, to the byte, in the same order.",
        "",
        f"Matched: {_share(verdicts['matched'], compared)} of the cases both sides ran; "
        f"{verdicts['not sampled']} not sampled (no sample of the dtype, or the GPU refuses "
        f"it), {verdicts['error'] + verdicts['missing']} errors or missing on one side.",
        "",
        *_by_kind(cases),
        "",
        "| cause of a mismatch | cases |",
        "| --- | ---: |",
        *(f"| {cause} | {n} |" for cause, n in causes.most_common()),
        "",
        f"The ops with the most cases that do not match ({WORST} at most):",
        "",
        *_worst(cases),
        "",
        "Sources:",
        "",
        f"- [1] `benchmarks/results/{src.path}`: `op_sweep.py compare` of the GPU's and the "
        "trace's files beside it",
        "",
    ]
