"""The "Zoo sweep" section of docs/accuracy.md: ``benchmarks/zoo.py``'s models, memfit's
predictions and the GPU's measurements, read from the sources ``accuracy_page.py`` declares with
the readers below, and compared by ``zoo_compare.compare`` (the numbers ``zoo.py compare``
writes): coverage and accuracy by source, the estimate errors grouped by cause, the models that
could not be built, and every workload ("not measured yet" where the GPU has not run it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accuracy_formats import Peak, Read, Source
from zoo_compare import ALLOCATED_TOLERANCE, RESERVED_TOLERANCE, compare

__all__ = [
    "ZooFile",
    "held_out_estimates",
    "held_out_peaks",
    "zoo_estimates",
    "zoo_fresh",
    "zoo_measured",
    "zoo_models",
    "zoo_section",
]


@dataclass(frozen=True)
class ZooFile:
    """One zoo results file: the models (``models.json``), estimates or measurements (JSON
    lines, a ``meta`` line before each run's rows)."""

    role: str  # "models", "estimates", "measured" or "fresh"
    data: Any


def zoo_models(data: Any, src: Source) -> list[ZooFile]:
    """``zoo.py list``: the entries and each workload's batch."""
    return [ZooFile("models", data)]


def zoo_estimates(data: Any, src: Source) -> list[ZooFile]:
    """``zoo.py estimate``: a row per workload (its peaks or its error)."""
    return [ZooFile("estimates", data)]


def zoo_measured(data: Any, src: Source) -> list[ZooFile]:
    """``zoo.py measure``: a row per workload measured (its peaks or its error)."""
    return [ZooFile("measured", data)]


def zoo_fresh(data: Any, src: Source) -> list[ZooFile]:
    """``zoo_history.py``: workloads measured again, each alone in a fresh process, whose
    peaks stand for the sweep's (many workloads to a process) measurement of them."""
    return [ZooFile("fresh", data)]


def _workload(row: dict[str, Any]) -> str:
    words = [f"{row['model']} ({row.get('source', 'transformers')})", row["mode"]]
    words.append(
        f"batch {row['batch_size']}" + (f" x {row['seq_len']}" if row.get("seq_len") else "")
    )
    return ", ".join([*words, str(row.get("precision", ""))])


def held_out_estimates(data: Any, src: Source) -> list[Peak]:
    """``zoo.py estimate`` of a held-out set (types the sweep had not taken) as the estimates of
    a held-out topic: a row per workload estimated without an error."""
    meta = next((r["meta"] for r in data if "meta" in r), {})
    versions = dict(meta.get("versions", {})) or dict(src.versions)
    date = str(meta.get("date") or src.folder_date)[:10]
    return [
        Peak(
            row["id"],
            "estimate",
            row["peak_allocated"],
            row["peak_reserved"],
            workload=_workload(row),
            versions=versions,
            date=date,
        )
        for row in data
        if "id" in row and "peak_allocated" in row
    ]


def held_out_peaks(data: Any, src: Source) -> list[Peak]:
    """``zoo_history.py``'s peaks of a held-out set, each workload in a fresh process."""
    return [
        Peak(
            row["id"],
            "measured",
            row["peak_allocated"],
            row["peak_reserved"],
            gpu=src.gpu,
            versions=dict(src.versions),
            date=src.folder_date,
        )
        for row in data
        if "peak_allocated" in row
    ]


def _files(read: Read) -> dict[str, list[tuple[ZooFile, Source]]]:
    found: dict[str, list[tuple[ZooFile, Source]]] = {}
    for record, src in read.of(ZooFile):
        found.setdefault(record.role, []).append((record, src))
    return found


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({100 * part / whole:.0f}%)" if whole else "-"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _meta_words(rows: list[dict[str, Any]]) -> str:
    """The date and the libraries of a file's first run, as its meta line names them."""
    meta = next((r["meta"] for r in rows if "meta" in r), {})
    libraries = meta.get("versions", {})
    words = [str(meta.get("date", ""))[:10]]
    if meta.get("gpu") and "driver" in meta:
        words.append(f"{meta['gpu']}, driver {meta['driver']}")
    if libraries:
        words.append("made with " + ", ".join(f"{k} {v}" for k, v in libraries.items()))
    return ", ".join(w for w in words if w)


def zoo_section(
    read: Read, title: str, percent: Callable[[float], str], gib: Callable[[int], str]
) -> tuple[list[tuple[float, float]], list[str]]:
    """The section's lines (none where no zoo file is declared), and the errors (allocated,
    reserved) of the workloads both estimated and measured, for the page's summary."""
    files = _files(read)
    if "models" not in files:
        return [], []
    models, models_src = files["models"][-1]
    estimates = [row for f, _ in files.get("estimates", []) for row in f.data]
    measured = [row for f, _ in files.get("measured", []) for row in f.data]
    measured += [{**row, "process": "fresh"} for f, _ in files.get("fresh", []) for row in f.data]
    result = compare(models.data, estimates, measured)
    cited = [(models_src, "the models and each workload's batch", "")]
    cited += [
        (
            s,
            "predictions committed before the measurements" if s.prediction else "estimates",
            _meta_words(f.data),
        )
        for f, s in files.get("estimates", [])
    ]
    cited += [(s, "measurements", _meta_words(f.data)) for f, s in files.get("measured", [])]
    fresh = "measured again, each alone in a fresh process; these stand for the sweep's measurement"
    cited += [(s, fresh, "") for _, s in files.get("fresh", [])]
    lines = [
        f"## {title}",
        "",
        "Every torchvision model, the smallest model of each timm family and a small config "
        "of each transformers model type with a training head (`benchmarks/zoo.py`), each "
        "trained (bf16-mixed, AdamW, two steps) and run for inference (bf16, one forward) at "
        "the batch memfit's own estimate puts at 20-40% of an H100's memory (up to a cap per "
        "kind of input). Coverage: the share estimated without an error. Within: estimates "
        f"within {ALLOCATED_TOLERANCE:g}% of the measured peak allocated and "
        f"{RESERVED_TOLERANCE:g}% of the measured peak reserved. Below: estimates more than 1% "
        "under the measured peak reserved. Peaks are allocated / reserved, in GiB.",
        "",
        *_summaries(files, models.data, measured, result),
        *_causes_table(result),
        *_unlisted_table(result),
        *_workload_table(result, percent, gib),
        "",
        "Sources:",
        "",
        *(
            f"- [{i}] `benchmarks/results/{s.path}`: {role}{'; ' + words if words else ''}"
            for i, (s, role, words) in enumerate(cited, 1)
        ),
        "",
    ]
    compared = [r for r in result["rows"] if "error_reserved" in r]
    return [(r["error_allocated"], r["error_reserved"]) for r in compared], lines


def _summaries(
    files: dict[str, list[tuple[ZooFile, Source]]],
    models: dict[str, Any],
    measured: list[dict[str, Any]],
    latest: dict[str, Any],
) -> list[str]:
    """A summary table per estimates file, in the order declared (each against every
    measurement, a prediction's as it was committed), then the latest estimate of each
    workload; one table where there is one file."""
    found = files.get("estimates", [])
    if len(found) < 2:
        return [*_summary_table(latest), ""]
    lines: list[str] = []
    for i, (f, src) in enumerate(found, 1):
        kind = "predictions committed before the measurements" if src.prediction else "estimates"
        lines += [f"`{src.path}` ({kind}) [{i + 1}]:", ""]
        lines += [*_summary_table(compare(models, f.data, measured)), ""]
    return lines


def _summary_table(result: dict[str, Any]) -> list[str]:
    lines = [
        "| source | workloads | estimated without error | measured | within | below "
        "| median estimate s | worst estimate s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    parts = [*result["by_source"].items(), ("all", result["summary"])]
    for name, s in parts:
        lines.append(
            f"| {name} | {s['workloads']} | {_share(s['estimated_without_error'], s['estimated'])} "
            f"| {s['measured']} | {_share(s['within_tolerance'], s['compared'])} "
            f"| {s['below_truth_reserved']} | {_seconds(s['median_estimate_seconds'])} "
            f"| {_seconds(s['worst_estimate_seconds'])} |"
        )
    return lines


def _causes_table(result: dict[str, Any]) -> list[str]:
    causes = result["errors_by_cause"]
    if not causes:
        return []
    lines = ["| estimate error | workloads | example |", "| --- | ---: | --- |"]
    for cause in causes:
        text = cause["cause"].replace("|", "\\|")
        lines.append(f"| {text} | {cause['count']} | {cause['example']} |")
    return [*lines, ""]


def _unlisted_table(result: dict[str, Any]) -> list[str]:
    unlisted = result["not_listed"]
    if not unlisted:
        return []
    lines = ["| model not built | why |", "| --- | --- |"]
    for entry in unlisted:
        error = entry["error"]
        text = f"{error.get('phase', '')}: {error.get('message', '')}"[:240]
        lines.append(f"| {entry['id']} | {text.replace('|', '/')} |")
    return [*lines, ""]


def _workload_table(
    result: dict[str, Any], percent: Callable[[float], str], gib: Callable[[int], str]
) -> list[str]:
    """A row per model: each workload's batch, estimated and measured peaks (allocated /
    reserved) and errors, or why there are none."""
    lines = [
        "| model | training batch | estimated | measured | error | inference batch | estimated "
        "| measured | error |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for row in result["rows"]:
        by_model.setdefault(row["model"], {})[row["mode"]] = row
    for model, rows in by_model.items():
        cells = [model]
        for mode in ("train", "infer"):
            row = rows.get(mode)
            cells += _cells(row, percent, gib) if row else ["", "", "", ""]
        lines.append(f"| {' | '.join(cells)} |")
    return lines


def _peaks(found: dict[str, Any], gib: Callable[[int], str]) -> str:
    return f"{gib(found['allocated'])} / {gib(found['reserved'])}"


def _cells(
    row: dict[str, Any], percent: Callable[[float], str], gib: Callable[[int], str]
) -> list[str]:
    shape = f"{row['batch_size']}" + (f" x {row['seq_len']}" if row["seq_len"] else "")
    est, meas = row["estimate"], row["measured"]
    if est is None:
        estimated = "not estimated"
    elif "error" in est:
        estimated = f"error: {est['cause'].replace('|', '/')}"
    else:
        estimated = _peaks(est, gib)
    if meas is None:
        measured = "not measured yet"
    elif "error" in meas:
        text = f"{meas['error'].get('type')}: {meas['error'].get('message', '')}"
        measured = f"error: {text[:100].replace('|', '/')}"
    else:
        measured = _peaks(meas, gib)
    error = (
        f"{percent(row['error_allocated'])} / {percent(row['error_reserved'])}"
        if "error_reserved" in row
        else ""
    )
    return [shape, estimated, measured, error]
