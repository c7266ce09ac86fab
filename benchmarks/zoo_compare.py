"""The zoo sweep's estimates against its measurements: coverage, accuracy and every workload.

Coverage is the share of the listed workloads memfit estimated without an error; accuracy the
share of those measured whose estimate is within 1% of the measured peak allocated and within 2%
of the measured peak reserved; "below" counts the estimates more than 1% under the measured
peak reserved (the error that lets a job run out of memory). Each workload's latest row counts
(a resumed run's rows follow the earlier ones; a workload measured again alone in a fresh
process, ``zoo_history.py``, after the sweep's many to a process, counts as that).

    summary = compare(models, estimate_rows, measured_rows)
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

__all__ = ["ALLOCATED_TOLERANCE", "RESERVED_TOLERANCE", "cause_of", "compare", "latest"]

ALLOCATED_TOLERANCE = 1.0  # percent
RESERVED_TOLERANCE = 2.0
BELOW = -1.0  # percent of the measured peak reserved


def latest(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each id's last row with an outcome (a result or an error); markers and meta skipped."""
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        if "id" in row and ("error" in row or "peak_reserved" in row):
            found[row["id"]] = row
    return found


def error_percent(estimated: int, measured: int) -> float:
    """Signed percent: + where the estimate is above the measurement."""
    return 100.0 * (estimated - measured) / measured


def cause_of(error: dict[str, Any]) -> str:
    """An error's cause, as errors are grouped: its type, memfit's op where named, and the
    underlying message without numbers, paths and quoted names."""
    message = error.get("message", "")
    inner = re.search(r"failed during \S+\.(?: Called from [^.]*\.)? (.*)", message)
    text = inner.group(1) if inner else message
    text = re.sub(r"Called from (\S+) \([^,)]*, (\w+)\)\.\s*", r"in \1 \2(): ", text)
    text = re.sub(r"The batch was .*", "", text)
    text = re.sub(r"\(at [^)]*\)|File \"[^\"]*\"|/\S+", "", text)
    text = re.sub(r"(?<!\w)'[^']*'(?!\w)|\"[^\"]*\"", "'...'", text)  # names, not "don't"
    text = re.sub(r"\d+", "N", text)
    text = " ".join(text.split())[:120]
    op = f" [{error['op']}]" if error.get("op") else ""
    return f"{error.get('type', '?')}{op}: {text}"


def _row(
    entry: dict[str, Any],
    workload: dict[str, Any],
    est: dict[str, Any] | None,
    meas: dict[str, Any] | None,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": workload["id"],
        "model": entry["id"],
        "source": entry["source"],
        "group": entry.get("group"),
        "mode": workload["mode"],
        "batch_size": workload["batch_size"],
        "seq_len": workload.get("seq_len"),
        "batch_from": workload.get("batch_from"),
    }
    if est is None:
        row["estimate"] = None
    elif "error" in est:
        row["estimate"] = {"error": est["error"], "cause": cause_of(est["error"])}
    else:
        row["estimate"] = {
            "allocated": est["peak_allocated"],
            "reserved": est["peak_reserved"],
            "seconds": est.get("seconds"),
        }
    if meas is None:
        row["measured"] = None
    elif "error" in meas:
        row["measured"] = {"error": meas["error"]}
    else:
        row["measured"] = {
            "allocated": meas["peak_allocated"],
            "reserved": meas["peak_reserved"],
            "gpu": meas.get("gpu_name"),
            "reserved_before": meas.get("reserved_before", 0),
        }
        if meas.get("process") == "fresh":  # alone in a process, as a user runs it
            row["measured"]["process"] = "fresh"
    good_est = row["estimate"] is not None and "error" not in row["estimate"]
    good_meas = row["measured"] is not None and "error" not in row["measured"]
    if good_est and good_meas:
        row["error_allocated"] = error_percent(
            row["estimate"]["allocated"], row["measured"]["allocated"]
        )
        row["error_reserved"] = error_percent(
            row["estimate"]["reserved"], row["measured"]["reserved"]
        )
    return row


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    estimated = [r for r in rows if r["estimate"] is not None]
    ok = [r for r in estimated if "error" not in r["estimate"]]
    measured = [r for r in rows if r["measured"] is not None and "error" not in r["measured"]]
    compared = [r for r in rows if "error_reserved" in r]
    within = [
        r
        for r in compared
        if abs(r["error_allocated"]) <= ALLOCATED_TOLERANCE
        and abs(r["error_reserved"]) <= RESERVED_TOLERANCE
    ]
    below = [r for r in compared if r["error_reserved"] < BELOW]
    seconds = [r["estimate"]["seconds"] for r in ok if r["estimate"].get("seconds") is not None]
    return {
        "workloads": len(rows),
        "estimated": len(estimated),
        "estimated_without_error": len(ok),
        "coverage": len(ok) / len(estimated) if estimated else None,
        "measured": len(measured),
        "measure_errors": sum(
            1 for r in rows if r["measured"] is not None and "error" in r["measured"]
        ),
        "compared": len(compared),
        "within_tolerance": len(within),
        "accuracy": len(within) / len(compared) if compared else None,
        "below_truth_reserved": len(below),
        "median_estimate_seconds": statistics.median(seconds) if seconds else None,
        "worst_estimate_seconds": max(seconds) if seconds else None,
        "median_abs_error_allocated": _median_abs(compared, "error_allocated"),
        "median_abs_error_reserved": _median_abs(compared, "error_reserved"),
    }


def _median_abs(rows: list[dict[str, Any]], key: str) -> float | None:
    return statistics.median(abs(r[key]) for r in rows) if rows else None


def compare(
    models: dict[str, Any], estimates: list[dict[str, Any]], measured: list[dict[str, Any]]
) -> dict[str, Any]:
    """The summary (all and by source), the errors grouped by cause, the entries that could
    not be listed, and a row per workload."""
    est, meas = latest(estimates), latest(measured)
    rows = []
    for entry in models["entries"]:
        for workload in entry.get("workloads", {}).values():
            rows.append(_row(entry, workload, est.get(workload["id"]), meas.get(workload["id"])))
    sources = sorted({r["source"] for r in rows})
    causes: Counter[str] = Counter()
    example: dict[str, str] = {}
    for r in rows:
        if r["estimate"] is not None and "error" in r["estimate"]:
            cause = r["estimate"]["cause"]
            causes[cause] += 1
            example.setdefault(cause, r["id"])
    unlisted = [
        {"id": e["id"], "source": e["source"], "error": e["error"]}
        for e in models["entries"]
        if "error" in e
    ]
    return {
        "summary": _summary(rows),
        "by_source": {s: _summary([r for r in rows if r["source"] == s]) for s in sources},
        "errors_by_cause": [
            {"cause": c, "count": n, "example": example[c]} for c, n in causes.most_common()
        ],
        "not_listed": unlisted,
        "rows": rows,
    }
