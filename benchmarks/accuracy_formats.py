"""The formats of memfit's results files, and reading them for docs/accuracy.md.

Each reader takes a file's data and its :class:`Source` declaration and returns records: a
:class:`Peak` (an estimate or a measurement of one workload's peak bytes), a :class:`Finding` (the
batch-size finders on one workload), a :class:`Plan` or a :class:`Race` (a plan and its runs under
the plan's cap). ``accuracy_page.py`` declares the sources, ``accuracy_tables.py`` renders them.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Peak:
    """One estimate or one measurement of a workload's peak allocated and reserved bytes."""

    key: str
    kind: str  # "estimate" or "measured"
    allocated: int
    reserved: int
    workload: str | None = None  # what ran, where the file says (a measured entry, a case)
    gpu: str | None = None
    versions: Mapping[str, str] = field(default_factory=dict)
    date: str | None = None
    held_out: bool = True  # False where a predictions file says the row was not predicted blind


@dataclass(frozen=True)
class Finding:
    """``batch_size_gpu.py``'s comparison of the batch-size finders on one workload."""

    workload: str
    memfit: Mapping[str, Any]
    accelerate: Mapping[int, Mapping[str, Any]]  # by starting batch size
    truth: int
    gpu: str
    versions: Mapping[str, str]
    date: str


@dataclass(frozen=True)
class Plan:
    """A plan ``plan_proof.py plan`` chose: its settings and what it predicted."""

    model: str
    budget: str
    global_batch: int
    seq_len: int | None
    chosen: Mapping[str, Any]
    candidates: list[Mapping[str, Any]]
    versions: Mapping[str, str]


@dataclass(frozen=True)
class Race:
    """``plan_versus.py``'s runs of one plan beside its contenders, under the plan's cap."""

    model: str
    budget: str
    allocator: str
    runs: list[Mapping[str, Any]]
    gpu: str
    date: str


Record = Peak | Finding | Plan | Race
Reader = Callable[[Any, "Source"], list[Any]]


@dataclass(frozen=True)
class Source:
    """A results file, its topic, and the reader of its format.

    ``topic`` None: the file only adds estimates or measurements to workloads another source
    places. ``prediction``: its estimates were committed before the measurements declared after
    it. ``variant`` tells apart a workload measured under another condition (and keys it apart).
    ``versions`` and ``gpu`` stand in where the file does not record them (the folder's README
    names them). ``note`` is added to each workload's description (a setting the id's words do
    not carry), ``workloads`` describes workloads whose rows carry no entry.
    """

    path: str
    topic: str | None
    read: Reader
    prediction: bool = False
    variant: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)
    gpu: str | None = None
    note: str = ""
    workloads: Mapping[str, str] = field(default_factory=dict)

    @property
    def file(self) -> Path:
        return RESULTS / self.path

    @property
    def folder_date(self) -> str:
        return self.path[:10]


# -- the formats -------------------------------------------------------------------------------


def load(path: Path) -> Any:
    """A results file's data: JSON, gzipped JSON, JSON lines, or a ``RESULT {...}`` line."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "rt") as fh:
            return json.load(fh)
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if path.suffix == ".txt":
        return [
            json.loads(line[len("RESULT ") :])
            for line in text.splitlines()
            if line.startswith("RESULT ")
        ]
    return json.loads(text)


def _day(date: str | None, src: Source) -> str:
    return (date or src.folder_date)[:10]


def _env(meta: Mapping[str, Any], src: Source) -> dict[str, str]:
    found = {k: meta[k] for k in ("torch", "transformers", "deepspeed") if meta.get(k)}
    return found or dict(src.versions)


def predictions(data: Any, src: Source) -> list[Peak]:
    """``predict.py`` (and ``parallelize_gpu.py predict``): ``meta`` and rows of estimates."""
    meta = data["meta"]
    return [
        Peak(
            row["id"],
            "estimate",
            row["estimate_allocated"],
            row["estimate_reserved"],
            versions=_env(meta, src),
            date=_day(meta.get("date"), src),
            held_out=row.get("held_out", True),
        )
        for row in data["rows"]
    ]


def accuracy(data: Any, src: Source) -> list[Peak]:
    """``accuracy.py``: the estimates (its measured bytes are the measured files' own)."""
    meta = data["meta"]
    return [
        Peak(
            row["id"],
            "estimate",
            row["estimate_allocated"],
            row["estimate_reserved"],
            versions=_env(meta, src),
            date=meta["estimate_date"],
        )
        for row in data["rows"]
        if "error" not in row
    ]


def measured(data: Any, src: Source) -> list[Peak]:
    """``gpu_measure.py`` (rows of a fresh process each; a failed run has an ``error``)."""
    rows = data["rows"] if isinstance(data, dict) else data
    date = data.get("meta", {}).get("date") if isinstance(data, dict) else None
    return [
        Peak(
            row["id"],
            "measured",
            row["peak_allocated"],
            row["peak_reserved"],
            workload=_describe(row["entry"], src)
            if "entry" in row
            else src.workloads.get(row["id"]),
            gpu=row.get("gpu_name") or src.gpu,
            versions=row.get("versions") or {"torch": row["torch_version"], **src.versions},
            date=_day(date, src),
        )
        for row in rows
        if "error" not in row
    ]


def cases(data: Any, src: Source) -> list[Peak]:
    """``offload_apply.py``: per case the estimate and, where it ran, the measured peaks."""
    date = _day(data["meta"].get("date"), src)
    found: list[Peak] = []
    for row in data["rows"]:
        if "estimate_allocated" not in row:
            continue  # the case failed before its estimate
        key, what = row["case"], _variant(row["case"], src)
        found.append(
            Peak(
                key,
                "estimate",
                row["estimate_allocated"],
                row["estimate_reserved"],
                workload=what,
                versions=src.versions,
                date=date,
            )
        )
        if "peak_allocated" in row:
            found.append(
                Peak(
                    key,
                    "measured",
                    row["peak_allocated"],
                    row["peak_reserved"],
                    workload=what,
                    gpu=row.get("gpu_name") or src.gpu,
                    versions=row.get("versions") or src.versions,
                    date=date,
                )
            )
    return found


def estimates_of(pick: str | None = None) -> Reader:
    """``estimates_of.py``: ``{id: [allocated, reserved]}`` (under ``pick`` where given)."""

    def read(data: Any, src: Source) -> list[Peak]:
        pairs = data[pick] if pick else data
        return [
            Peak(k, "estimate", a, r, versions=src.versions, date=src.folder_date)
            for k, (a, r) in pairs.items()
        ]

    return read


def reestimated(data: Any, src: Source) -> list[Peak]:
    """Rows of ``id``, ``est_allocated``, ``est_reserved`` (and the measured bytes again)."""
    return [
        Peak(
            r["id"],
            "estimate",
            r["est_allocated"],
            r["est_reserved"],
            versions=src.versions,
            date=src.folder_date,
        )
        for r in data
    ]


def finders(data: Any, src: Source) -> list[Finding]:
    """``batch_size_gpu.py``: memfit's finder, accelerate's from several starts, the truth."""
    found = []
    for spec_and_runs in data["workloads"].values():
        spec = spec_and_runs["spec"]
        shape = f", sequence {spec['seq_len']}" if spec["seq_len"] else ""
        found.append(
            Finding(
                workload=f"{spec['model']}{shape}, {spec['precision']}, AdamW",
                memfit=spec_and_runs["memfit"],
                accelerate={
                    int(k.split("@")[1]): v
                    for k, v in spec_and_runs.items()
                    if k.startswith("accelerate@") and isinstance(v, dict)
                },
                truth=spec_and_runs["truth"]["batch_size"],
                gpu=data["gpu"],
                versions={k: data[k] for k in ("torch", "accelerate")},
                date=data["date"][:10],
            )
        )
    return found


def plans(data: Any, src: Source) -> list[Plan]:
    """``plan_proof.py plan``: the plan chosen for each workload and budget."""
    return [
        Plan(
            model=row["model"],
            budget=row["budget"],
            global_batch=row["plan"]["global_batch"],
            seq_len=row["plan"]["seq_len"],
            chosen=row["plan"]["chosen"],
            candidates=row["plan"]["candidates"],
            versions=row["plan"]["versions"],
        )
        for row in data["rows"]
    ]


def races(data: Any, src: Source) -> list[Race]:
    """``plan_versus.py``: each plan and its contenders run in turn under the plan's cap."""
    return [
        Race(
            row["model"],
            row["budget"],
            row["allocator"],
            row["runs"],
            src.gpu or "",
            data["meta"]["date"][:10],
        )
        for row in data["rows"]
    ]


# -- a workload in words -----------------------------------------------------------------------


def _describe(entry: Mapping[str, Any], src: Source) -> str:
    """A measured entry's settings in words, only those it sets (and the source's note)."""
    model = str(entry["model"]).removesuffix(":make_model")
    shape = f"batch {entry['batch_size']}"
    if entry.get("seq_len"):
        shape += f" x {entry['seq_len']}"
    precision = entry.get("precision", "fp32")
    if src.note and "mixed" in precision:
        precision += f" ({src.note})"
    words = [model, shape, precision]
    if entry.get("mode") == "infer":
        words.append("inference")
    if entry.get("accumulation", 1) > 1:
        words.append(f"{entry['accumulation']}-way accumulation")
    if "optimizer" in entry:
        words.append(entry["optimizer"])
    words += _memory_settings(entry)
    if "strategy" in entry:
        strategy = STRATEGIES.get(entry["strategy"], entry["strategy"])
        words.append(f"{strategy} rank 0 of {entry.get('world_size', 1)}")
    if "pad_from" in entry:
        words.append(f"padded from token {entry['pad_from']}")
    return _variant(", ".join(words), src)


STRATEGIES = {
    "ddp": "DDP",
    "fsdp2": "FSDP2",
    "zero1": "ZeRO-1",
    "zero2": "ZeRO-2",
    "zero3": "ZeRO-3",
}


def _memory_settings(entry: Mapping[str, Any]) -> list[str]:
    ckpt = entry.get("checkpointing")
    words = []
    if ckpt is True:
        words.append("checkpointed")
    elif ckpt == "selective":
        words.append("selective checkpointing")
    elif isinstance(ckpt, float):
        words.append(f"{ckpt:.0%} checkpointed")
    if "offload" in entry:
        words.append(f"{entry['offload']:.0%} offloaded")
    if entry.get("offload_checkpoints"):
        words.append("checkpoint inputs offloaded")
    if entry.get("batch_held"):
        words.append("batch held")
    if "activation_memory_budget" in entry:
        words.append(f"activation memory budget {entry['activation_memory_budget']:g}")
    for name, value in entry.get("techniques", {}).items():  # memfit.technique's, by name
        words.append(name.replace("_", " ") + ("" if value is True else f" {value}"))
    config = entry.get("allocator_config", "")
    if config:
        words.append("expandable segments" if config == "expandable_segments:True" else config)
    return words


def _variant(words: str, src: Source) -> str:
    return f"{words}; {src.variant}" if src.variant else words


# -- reading them ------------------------------------------------------------------------------


class MissingResultError(Exception):
    """A declared results file is not in the repository."""


@dataclass
class Read:
    """Every source's records, each beside its source."""

    records: list[tuple[Record, Source]]

    def of(self, kind: type[Any]) -> list[tuple[Any, Source]]:
        return [(r, s) for r, s in self.records if isinstance(r, kind)]


def read_all(sources: list[Source]) -> Read:
    """Read every declared source, in order; a missing one stops with the path and the fix."""
    missing = [s.path for s in sources if not s.file.exists()]
    if missing:
        raise MissingResultError(
            f"benchmarks/accuracy_page.py declares results files that are not in "
            f"benchmarks/results/: {', '.join(missing)}. Restore them, or change their "
            f"declaration in SOURCES to the files' current names."
        )
    return Read([(record, src) for src in sources for record in src.read(load(src.file), src)])
