"""The tables of docs/accuracy.md, from the records ``accuracy_formats.py`` reads.

Memory tables: per workload the latest estimate and the latest measurement, the error of one
against the other (+ where memfit said more than the GPU used) and, where a prediction was
committed before the measurement, whether the estimate shown is that prediction. The plans and
step times have tables of their own. Nothing here is a number the files do not hold, but for
the errors and their medians, computed from the numbers read.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accuracy_formats import Finding, Peak, Plan, Race, Read, Source
from accuracy_ops import op_sweep_section
from accuracy_zoo import zoo_section

GIB = 2**30
Ident = tuple[str, str]  # a workload's id and the source's variant


@dataclass(frozen=True)
class Row:
    """One workload of a memory table."""

    topic: str
    estimate: Peak
    estimate_src: Source
    measured: Peak
    measured_src: Source
    prediction: tuple[Peak, Source] | None

    @property
    def errors(self) -> tuple[float, float]:
        return (
            error(self.estimate.allocated, self.measured.allocated),
            error(self.estimate.reserved, self.measured.reserved),
        )


def error(estimated: float, measured: float) -> float:
    """Signed percent: + where the estimate is above the measurement."""
    return 100 * (estimated - measured) / measured


def percent(value: float, signed: bool = True) -> str:
    """Two decimals; below 0.01% the first significant digit; 0 is "exact"."""
    if value == 0:
        return "exact"
    magnitude = abs(value)
    places = max(2, -math.floor(math.log10(magnitude)))
    if round(magnitude, places) >= 0.01:  # 0.00999 is shown as 0.01, not 0.010
        places = 2
    return f"{value:+.{places}f}%" if signed else f"{magnitude:.{places}f}%"


def gib(size: int) -> str:
    return f"{size / GIB:.2f}"


def versions(found: Mapping[str, str]) -> str:
    return ", ".join(f"{name} {version}" for name, version in found.items())


def _same_version(a: str, b: str) -> bool:
    a, b = a.split("+")[0], b.split("+")[0]
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


# -- which estimate and which measurement ------------------------------------------------------


def memory_rows(read: Read) -> dict[str, list[Row]]:
    """Per topic, each measured workload with its latest estimate and latest measurement."""
    topic_of: dict[Ident, str] = {}
    estimates: dict[Ident, tuple[Peak, Source]] = {}
    predictions: dict[Ident, list[tuple[int, Peak, Source]]] = defaultdict(list)
    measures: dict[Ident, tuple[Peak, Source]] = {}
    first_measured: dict[Ident, int] = {}
    for index, (peak, src) in enumerate(read.of(Peak)):
        ident = (peak.key, src.variant)
        if src.topic:
            topic_of.setdefault(ident, src.topic)
        if peak.kind == "measured":
            measures[ident] = (peak, src)
            first_measured.setdefault(ident, index)
            continue
        estimates[ident] = (peak, src)
        if src.prediction and peak.held_out:
            predictions[ident].append((index, peak, src))
    rows: dict[str, list[Row]] = defaultdict(list)
    for ident, (peak, src) in measures.items():
        plain = (ident[0], "")
        estimate = estimates.get(ident) or estimates.get(plain)
        if estimate is None:
            continue
        before = [
            (p, s)
            for i, p, s in predictions.get(ident) or predictions.get(plain, [])
            if i < first_measured[ident]
        ]
        topic = topic_of.get(ident) or topic_of[plain]
        rows[topic].append(Row(topic, *estimate, peak, src, before[-1] if before else None))
    return rows


# -- citing files ------------------------------------------------------------------------------


@dataclass
class Refs:
    """The files a table's numbers came from, numbered in the order the table cites them."""

    numbers: dict[str, int] = field(default_factory=dict)
    roles: dict[str, list[str]] = field(default_factory=dict)
    details: dict[str, str] = field(default_factory=dict)

    def cite(self, src: Source, role: str, detail: str = "") -> str:
        number = self.numbers.setdefault(src.path, len(self.numbers) + 1)
        if role not in self.roles.setdefault(src.path, []):
            self.roles[src.path].append(role)
        if detail:
            self.details.setdefault(src.path, detail)
        return f"[{number}]"

    def lines(self) -> list[str]:
        out = ["Sources:", ""]
        for path, number in self.numbers.items():
            detail = f"; {self.details[path]}" if path in self.details else ""
            out.append(
                f"- [{number}] `benchmarks/results/{path}`: "
                f"{' and '.join(self.roles[path])}{detail}"
            )
        return out


def _estimate_role(src: Source) -> str:
    return "predictions committed before the measurements" if src.prediction else "estimates"


def _peak_detail(peak: Peak) -> str:
    words = [peak.date or ""]
    if peak.kind == "estimate" and peak.versions:
        words.append(f"made with {versions(peak.versions)}")
    return ", ".join(w for w in words if w)


# -- memory tables -----------------------------------------------------------------------------

MEMORY_HEADER = [
    "| workload | GPU | versions | measured on | estimated allocated | estimated reserved "
    "| measured allocated | measured reserved | error allocated | error reserved "
    "| prediction | files |",
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
]


def memory_table(rows: list[Row]) -> list[str]:
    refs = Refs()
    lines = list(MEMORY_HEADER)
    for row in rows:
        est, meas = row.estimate, row.measured
        files = [
            "estimate "
            + refs.cite(row.estimate_src, _estimate_role(row.estimate_src), _peak_detail(est)),
            "measured " + refs.cite(row.measured_src, "measurements", _peak_detail(meas)),
        ]
        if row.prediction and row.prediction[1] is not row.estimate_src:
            files.append(
                "prediction "
                + refs.cite(
                    row.prediction[1],
                    _estimate_role(row.prediction[1]),
                    _peak_detail(row.prediction[0]),
                )
            )
        alloc, reserved = row.errors
        lines.append(
            f"| {meas.workload or est.key} | {meas.gpu or ''} | {_row_versions(row)} "
            f"| {meas.date} | {gib(est.allocated)} | {gib(est.reserved)} "
            f"| {gib(meas.allocated)} | {gib(meas.reserved)} "
            f"| {_error_cell(est.allocated, meas.allocated, alloc)} "
            f"| {_error_cell(est.reserved, meas.reserved, reserved)} "
            f"| {_prediction_cell(row)} | {'; '.join(files)} |"
        )
    return [*lines, "", *refs.lines()]


def _error_cell(estimated: int, measured: int, value: float) -> str:
    return "exact" if estimated == measured else percent(value)


def _row_versions(row: Row) -> str:
    text = versions(row.measured.versions)
    gpu, est = row.measured.versions, row.estimate.versions
    differs = [
        k
        for k in ("torch", "transformers")
        if k in est and not _same_version(est[k], gpu.get(k, ""))
    ]
    if differs:
        text += f"; estimated with {versions({k: est[k] for k in differs})}"
    return text


def _prediction_cell(row: Row) -> str:
    if row.prediction is None:
        return "none"
    peak, _ = row.prediction
    if (peak.allocated, peak.reserved) == (row.estimate.allocated, row.estimate.reserved):
        return "this estimate"
    alloc = _error_cell(
        peak.allocated, row.measured.allocated, error(peak.allocated, row.measured.allocated)
    )
    reserved = _error_cell(
        peak.reserved, row.measured.reserved, error(peak.reserved, row.measured.reserved)
    )
    return f"{alloc} / {reserved}"


# -- the batch-size finder ---------------------------------------------------------------------


def finder_rows(read: Read) -> list[tuple[Finding, Source, Mapping[str, Any]]]:
    """Each workload's latest comparison, with memfit's trial at its answer."""
    latest: dict[str, tuple[Finding, Source]] = {}
    for finding, src in read.of(Finding):
        latest[finding.workload] = (finding, src)
    out = []
    for finding, src in latest.values():
        answer = finding.memfit["batch_size"]
        trial = [t for t in finding.memfit["result"]["trials"] if t["batch_size"] == answer][-1]
        out.append((finding, src, trial))
    return out


def finder_table(rows: list[tuple[Finding, Source, Mapping[str, Any]]]) -> list[str]:
    refs = Refs()
    lines = [
        "| workload | GPU | versions | measured on | memfit's batch size | largest that ran "
        "| accelerate, by starting batch size | estimated allocated | estimated reserved "
        "| measured allocated | measured reserved | error allocated | error reserved | files |",
        "| --- | --- | --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- |",
    ]
    for finding, src, trial in rows:
        memfit = finding.memfit
        est_alloc = memfit["result"]["predicted_peak_allocated"]
        est_res = trial["predicted_reserved"]
        accelerate = "; ".join(
            f"{start}: {run['batch_size']} ({run['trials']} trials, {run['seconds']:.1f} s)"
            for start, run in sorted(finding.accelerate.items())
        )
        measured_alloc, measured_res = trial["peak_allocated"], trial["peak_reserved"]
        errors = (
            _error_cell(est_alloc, measured_alloc, error(est_alloc, measured_alloc)),
            _error_cell(est_res, measured_res, error(est_res, measured_res)),
        )
        lines.append(
            f"| {finding.workload} | {finding.gpu} | {versions(finding.versions)} "
            f"| {finding.date} | {memfit['batch_size']} ({memfit['trials']} trial, "
            f"{memfit['seconds']:.1f} s) | {finding.truth} | {accelerate} "
            f"| {gib(est_alloc)} | {gib(est_res)} | {gib(measured_alloc)} | {gib(measured_res)} "
            f"| {errors[0]} | {errors[1]} "
            f"| {refs.cite(src, 'estimates and measurements', finding.date)} |"
        )
    return [*lines, "", *refs.lines()]


def finder_errors(
    rows: list[tuple[Finding, Source, Mapping[str, Any]]],
) -> list[tuple[float, float]]:
    return [
        (
            error(f.memfit["result"]["predicted_peak_allocated"], t["peak_allocated"]),
            error(t["predicted_reserved"], t["peak_reserved"]),
        )
        for f, _, t in rows
    ]


# -- plans and step times ----------------------------------------------------------------------


def settings_words(s: Mapping[str, Any], allocator: str) -> str:
    """A configuration as the plans and the runs write it, in words."""
    ckpt = s["activation_checkpointing"]
    if isinstance(ckpt, bool):
        ckpt_words = "full" if ckpt else "none"
    else:
        ckpt_words = ckpt if isinstance(ckpt, str) else f"{ckpt:.0%}"
    words = [
        f"{s.get('micro_batch', s.get('batch_size'))} x {s['accumulation']}",
        s["precision"],
        f"checkpointing {ckpt_words}",
        s["optimizer"],
    ]
    if s.get("offload"):
        words.append(f"{s['offload']:.0%} offloaded")
    if s.get("offload_checkpoints"):
        words.append("checkpoint inputs offloaded")
    if allocator:
        words.append("expandable segments" if "expandable" in allocator else allocator)
    return ", ".join(words)


@dataclass(frozen=True)
class Proof:
    """A plan beside its runs under the plan's cap."""

    plan: Plan
    plan_src: Source
    race: Race
    race_src: Source

    @property
    def workload(self) -> str:
        shape = f" x {self.plan.seq_len}" if self.plan.seq_len else ""
        return f"{self.plan.model}, global batch {self.plan.global_batch}{shape}"

    @property
    def planned(self) -> Mapping[str, Any]:
        return next(r for r in self.race.runs if r["is_plan"])

    @property
    def ran(self) -> list[Mapping[str, Any]]:
        return [r for r in self.race.runs if r["step_seconds"]]

    def cite(self, refs: Refs, plan_word: str, runs_word: str) -> str:
        """The plans file and the runs file, cited in ``refs``."""
        made = "made with " + versions(self.plan.versions)
        plan = refs.cite(self.plan_src, "plans", made)
        runs = refs.cite(self.race_src, "runs under the plan's cap", self.race.date)
        return f"{plan_word} {plan}; {runs_word} {runs}"

    def predicted(self, run: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The plan's candidate of the run's configuration, if the planner traced it."""
        if run["is_plan"]:
            return self.plan.chosen
        found = [c for c in self.plan.candidates if _same(run["settings"], c, self.race.allocator)]
        return found[0] if found else None


def _same(settings: Mapping[str, Any], candidate: Mapping[str, Any], allocator: str) -> bool:
    a, b = settings["activation_checkpointing"], candidate["activation_checkpointing"]
    both_float = isinstance(a, float) and isinstance(b, float)
    return (
        (abs(a - b) < 0.01 if both_float else a == b)
        and settings["batch_size"] == candidate["micro_batch"]
        and settings["accumulation"] == candidate["accumulation"]
        and settings["precision"] == candidate["precision"]
        and settings["optimizer"] == candidate["optimizer"]
        and bool(settings.get("offload_checkpoints")) == bool(candidate["offload_checkpoints"])
        and settings.get("offload", 0.0) == candidate["offload"]
        and candidate["allocator_config"] == allocator
    )


def proofs(read: Read) -> list[Proof]:
    """Each raced plan (the latest race of each workload and budget) with its plan."""
    chosen = {(p.model, p.budget): (p, s) for p, s in read.of(Plan)}
    races = {(r.model, r.budget): (r, s) for r, s in read.of(Race)}
    return [Proof(*chosen[key], *races[key]) for key in chosen if key in races]


def plan_table(rows: list[Proof]) -> list[str]:
    refs = Refs()
    lines = [
        "| workload | budget | plan | predicted ms | measured ms | fastest that ran | its ms "
        "| fastest / plan | plan out of memory | others out of memory | planned reserved "
        "| measured reserved | GPU | versions | measured on | files |",
        "| --- | --- | --- | ---: | ---: | --- | ---: | ---: | --- | --- | ---: | ---: | --- "
        "| --- | --- | --- |",
    ]
    for proof in rows:
        plan, planned = proof.plan.chosen, proof.planned
        best = min(proof.ran, key=lambda r: r["step_seconds"])
        others = [r for r in proof.race.runs if not r["is_plan"]]
        ran_plan = bool(planned["step_seconds"])
        files = proof.cite(refs, "plan", "runs")
        measured_ms = f"{planned['step_seconds'] * 1e3:.1f}" if ran_plan else "-"
        share = f"{best['step_seconds'] / planned['step_seconds']:.1%}" if ran_plan else "-"
        reserved = gib(planned["peak_reserved"]) if ran_plan else "-"
        lines.append(
            f"| {proof.workload} | {proof.plan.budget} "
            f"| {settings_words(plan, plan['allocator_config'])} "
            f"| {plan['step_seconds'] * 1e3:.1f} | {measured_ms} "
            f"| {settings_words(best['settings'], proof.race.allocator)} "
            f"| {best['step_seconds'] * 1e3:.1f} | {share} | {'no' if ran_plan else 'yes'} "
            f"| {sum(1 for r in others if not r['step_seconds'])} of {len(others)} "
            f"| {gib(plan['peak_reserved'])} | {reserved} | {proof.race.gpu} "
            f"| {versions(proof.race_src.versions)} | {proof.race.date} | {files} |"
        )
    return [*lines, "", *refs.lines()]


def step_rows(rows: list[Proof]) -> list[tuple[Proof, Mapping[str, Any], Mapping[str, Any]]]:
    """Every run whose configuration the planner predicted, with its prediction."""
    out = []
    for proof in rows:
        for run in proof.ran:
            predicted = proof.predicted(run)
            if predicted is not None:
                out.append((proof, run, predicted))
    return out


def step_table(rows: list[tuple[Proof, Mapping[str, Any], Mapping[str, Any]]]) -> list[str]:
    refs = Refs()
    lines = [
        "| workload | budget | configuration | the plan | predicted ms | measured ms | error "
        "| bound | GPU | versions | measured on | files |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |",
    ]
    for proof, run, predicted in rows:
        files = proof.cite(refs, "predicted", "measured")
        lines.append(
            f"| {proof.workload} | {proof.plan.budget} "
            f"| {settings_words(run['settings'], proof.race.allocator)} "
            f"| {'yes' if run['is_plan'] else ''} | {predicted['step_seconds'] * 1e3:.1f} "
            f"| {run['step_seconds'] * 1e3:.1f} "
            f"| {percent(error(predicted['step_seconds'], run['step_seconds']))} "
            f"| {predicted['bound']} | {proof.race.gpu} | {versions(proof.race_src.versions)} "
            f"| {proof.race.date} | {files} |"
        )
    return [*lines, "", *refs.lines()]


# -- the page ----------------------------------------------------------------------------------


def _summary_line(title: str, errors: list[tuple[float, float]]) -> str:
    cells = []
    for column in (0, 1):
        values = [e[column] for e in errors]
        cells.append(percent(statistics.median(abs(v) for v in values), signed=False))
        cells.append(percent(max(values, key=abs)))
    return f"| {title} | {len(errors)} | {' | '.join(cells)} |"


def render(read: Read, topics: list[tuple[str, str]]) -> str:
    """The whole page: the summary, then a table per topic (its key and title), in order."""
    titles = dict(topics)
    memory = memory_rows(read)
    found = finder_rows(read)
    raced = proofs(read)
    steps = step_rows(raced)
    summary = [
        "| topic | workloads | median error allocated | worst error allocated "
        "| median error reserved | worst error reserved |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    sections: list[str] = []
    for topic, title in topics:
        if topic == "zoo":  # a sweep over the model zoos: a section of its own
            errors, lines = zoo_section(read, title, percent, gib)
            if errors:
                summary.append(_summary_line(title, errors))
            sections += lines
        elif topic == "opsweep":  # an op at a time: a section of its own
            sections += op_sweep_section(read, title)
        elif topic in memory:
            summary.append(_summary_line(title, [r.errors for r in memory[topic]]))
            sections += [f"## {title}", "", *memory_table(memory[topic]), ""]
    if found:
        summary.append(_summary_line(titles["finder"], finder_errors(found)))
        sections += [f"## {titles['finder']}", "", *finder_table(found), ""]
    times = _time_summary(raced, steps, titles)
    if raced:
        sections += [f"## {titles['planner']}", "", *plan_table(raced), ""]
    if steps:
        sections += [f"## {titles['steptime']}", "", *step_table(steps), ""]
    head = [
        "# Accuracy",
        "",
        "memfit's estimates, made on a CPU, against what the GPU measured, read from the "
        "committed results under `benchmarks/results/`: `python benchmarks/accuracy_page.py` "
        "regenerates this page.",
        "",
        "Sizes are GiB (2^30 bytes). An error is (estimated - measured) / measured: + where "
        'memfit said more than the GPU used, "exact" where the bytes are equal. Medians are '
        "of the absolute errors; the worst is the largest in size, with its sign. "
        '"prediction": the error of the estimate committed before the measurement, unless '
        'its file says the workload had been run before; "this estimate" where it is the '
        'estimate shown, "none" where there was no such estimate.',
        "",
        "## Summary",
        "",
        *summary,
        "",
        *times,
        "",
    ]
    return "\n".join([*head, *sections]).rstrip("\n") + "\n"


def _time_summary(
    raced: list[Proof],
    steps: list[tuple[Proof, Mapping[str, Any], Mapping[str, Any]]],
    titles: Mapping[str, str],
) -> list[str]:
    lines = [
        "| topic | rows | compared | median | worst | out of memory |",
        "| --- | ---: | --- | ---: | ---: | --- |",
    ]
    if raced:
        shares = [
            min(r["step_seconds"] for r in p.ran) / p.planned["step_seconds"]
            for p in raced
            if p.planned["step_seconds"]
        ]
        oom = sum(1 for p in raced if not p.planned["step_seconds"])
        lines.append(
            f"| {titles['planner']} | {len(raced)} | the fastest step that ran over the plan's "
            f"| {statistics.median(shares):.1%} | {min(shares):.1%} "
            f"| {oom} of {len(raced)} plans |"
        )
    if steps:
        errors = [error(p["step_seconds"], r["step_seconds"]) for _, r, p in steps]
        lines.append(
            f"| {titles['steptime']} | {len(steps)} | predicted against measured step time "
            f"| {percent(statistics.median(abs(e) for e in errors), signed=False)} "
            f"| {percent(max(errors, key=abs))} | |"
        )
    return lines
