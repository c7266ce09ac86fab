"""The words and cells of a plan (:class:`memfit.planner.Plan`), shared by the terminal table
(:mod:`memfit.report._plan_console`) and the Markdown (:mod:`memfit.report._plan_markdown`),
so that both say the same thing in the same units.

Which rows a table shows: every candidate with ``show_all``; otherwise at most
:data:`PLAN_ROWS`, the fitting ones fastest first and then the closest that do not fit (the
order ``Plan.candidates`` keeps), with a few of the latter kept even when many fit, because
they show what the budget rules out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memfit._units import format_bytes
from memfit.report._text import UNITS_CAPTION

if TYPE_CHECKING:  # the planner's package imports torch; rendering needs only the fields
    from memfit.planner import Candidate, Evaluated, Plan

__all__ = [
    "ALLOCATOR_COLUMN",
    "FREED_MARK",
    "PLAN_COLUMNS",
    "PLAN_ROWS",
    "SETTINGS",
    "SETTINGS_COLUMN",
    "TOKENS_COLUMN",
    "PlanRow",
    "allocator_text",
    "budget_cells",
    "budget_text",
    "candidate_cells",
    "checkpointing_text",
    "chosen_lines",
    "compact_columns",
    "has_tokens",
    "needs_caption",
    "nothing_fits_lines",
    "plan_columns",
    "plan_footer",
    "plan_rows",
    "plan_title",
    "rate_text",
    "settings_tags",
    "shown_rows",
    "tags_legend",
]

PLAN_ROWS = 15  # rows of the table without show_all
_MIN_OVER = 3  # rows that do not fit, kept even when more fit than the table shows

# header, and whether the column is numeric (right-aligned)
PLAN_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("rank", True),
    ("micro x accum.", False),
    ("precision", False),
    ("checkpointing", False),
    ("optimizer", False),
    ("allocator", False),
    ("needs", True),
    ("step ms", True),
    ("samples/s", True),
    ("tokens/s", True),
    ("bound", False),
    ("fits", False),
)
TOKENS_COLUMN = "tokens/s"
ALLOCATOR_COLUMN = "allocator"
# a narrow terminal's table has one column for these four (compact_columns)
SETTINGS = ("precision", "checkpointing", "optimizer", "allocator")
SETTINGS_COLUMN = "settings"
_ALLOCATOR_NAMES = {"": "default", "expandable_segments:True": "expandable"}


@dataclass(frozen=True)
class PlanRow:
    """One row of the table: the candidate, its rank among those that fit (``None`` for one
    that does not), and whether it is the plan's choice or the user's own configuration."""

    evaluated: Evaluated
    rank: int | None
    chosen: bool
    yours: bool


def checkpointing_text(setting: bool | str | float) -> str:
    """``False`` -> ``none``, ``True`` -> ``full``, a fraction of the blocks as a share, a
    policy's name as it is."""
    if setting is True:
        return "full"
    if setting is False:
        return "none"
    if isinstance(setting, float):
        return f"{setting:.0%} of blocks"
    return str(setting)


def offload_text(share: float, checkpoints: bool) -> str:
    """Activation offload in a cell: ``rest offloaded`` (every block not checkpointed),
    ``50% of rest offloaded``, ``inputs offloaded`` (the checkpointed blocks'); empty for none."""
    parts = []
    if checkpoints:
        parts.append("inputs offloaded")
    if share:
        parts.append("rest offloaded" if share >= 1 else f"{share:.0%} of rest offloaded")
    return ", ".join(parts)


def allocator_text(config: str) -> str:
    """A ``PYTORCH_CUDA_ALLOC_CONF`` text in a cell: the usual ones by a short name."""
    return _ALLOCATOR_NAMES.get(config, config)


def settings_tags(c: Candidate) -> list[str]:
    """``c``'s settings as short tags for a narrow table, where the words would take three
    lines: ``bf16-mixed ckpt-50% offload adamw-fused expandable``. :func:`tags_legend` says
    what they mean."""
    tags = [c.precision]
    if c.memory_budget is not None:
        tags.append(f"budget-{c.memory_budget:g}")
    elif c.checkpointing is True or c.checkpointing is False:
        tags.append("ckpt" if c.checkpointing else "no-ckpt")
    elif isinstance(c.checkpointing, float):
        tags.append(f"ckpt-{c.checkpointing:.0%}")
    else:
        tags.append("sel-ckpt" if c.checkpointing == "selective" else f"{c.checkpointing}-ckpt")
    if c.offload:
        tags.append("offload" if c.offload >= 1 else f"offload-{c.offload:.0%}")
    if c.offload_checkpoints:
        tags.append("offload-in")
    tags.append(c.optimizer)
    if c.allocator_config:
        tags.append(allocator_text(c.allocator_config))
    return tags


# what each kind of tag means, in the order the legend says them
_TAG_MEANINGS = (
    ("ckpt", "full activation checkpointing"),
    ("no-ckpt", "none"),
    ("sel-ckpt", "selective"),
    ("ckpt-N%", "N% of the blocks checkpointed"),
    ("budget-B", "torch.compile's activation memory budget B"),
    ("offload", "the blocks not checkpointed offload their activations to host memory"),
    ("offload-N%", "N% of those blocks do"),
    ("offload-in", "the checkpointed blocks' inputs are offloaded"),
    ("expandable", "expandable_segments:True"),
)


def _tag_kind(tag: str) -> str:
    """The legend's name of ``tag``: a share as ``N%``, a budget as ``B``."""
    if tag.startswith("budget-"):
        return "budget-B"
    return re.sub(r"\d+%$", "N%", tag)


def tags_legend(candidates: list[Candidate]) -> str:
    """What the tags of ``candidates``' settings (:func:`settings_tags`) say, those shown
    only: ``Settings: precision, checkpointing, ..., optimizer, allocator; ckpt: full ...``."""
    kinds = {_tag_kind(t) for c in candidates for t in settings_tags(c)}
    meanings = [f"{tag}: {meaning}" for tag, meaning in _TAG_MEANINGS if tag in kinds]
    order = "precision, checkpointing, activation offload, optimizer, allocator"
    return f"Settings: {order}" + "".join(f"; {m}" for m in meanings) + "."


def ms_text(seconds: float) -> str:
    """A step time in milliseconds: ``420``, ``12.5`` below 100, ``0.52`` below 10."""
    ms = seconds * 1e3
    if ms < 10:
        return f"{ms:.2f}"
    return f"{ms:,.1f}" if ms < 100 else f"{ms:,.0f}"


def rate_text(value: float | None) -> str:
    """Samples or tokens a second: ``1,234``, ``12.3`` below 100, ``-`` when not known."""
    if value is None:
        return "-"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def plan_title(plan: Plan) -> str:
    """``Plan for gpt2 in 24.00 GiB (global batch 32, sequence 1024)``."""
    workload = f"global batch {plan.global_batch}"
    if plan.seq_len is not None:
        workload += f", sequence {plan.seq_len}"
    return f"Plan for {plan.model} in {format_bytes(plan.budget)} ({workload})"


def budget_text(plan: Plan) -> str:
    """``24.00 GiB, 22.80 GiB usable (5% kept free)``."""
    return (
        f"{format_bytes(plan.budget)}, {format_bytes(plan.usable)} usable "
        f"({plan.margin:.0%} kept free)"
    )


FREED_MARK = "↺"  # the needs cell of a step that fits by freeing the cache in its first steps


def budget_cells(plan: Plan, headers: list[str]) -> list[str]:
    """The row of the budget line, between the rows that fit and those that do not: its name
    under the rank, the usable memory under ``needs``."""
    cells = {"rank": "budget", "needs": f"{format_bytes(plan.usable)}"}
    return [cells.get(h, "") for h in headers]


def _same(e: Evaluated, candidate: Candidate | None) -> bool:
    return candidate is not None and e.candidate == candidate


def plan_rows(plan: Plan) -> list[PlanRow]:
    """Every candidate as a row, in the plan's order, ranked among those that fit."""
    chosen = plan.chosen.candidate if plan.chosen else None
    yours = plan.baseline.candidate if plan.baseline else None
    rows: list[PlanRow] = []
    rank = 0
    for e in plan.candidates:
        if e.fits:
            rank += 1
        rows.append(PlanRow(e, rank if e.fits else None, _same(e, chosen), _same(e, yours)))
    return rows


def shown_rows(rows: list[PlanRow], show_all: bool = False) -> list[PlanRow]:
    """The rows a table shows (see the module's docstring): fitting rows first, then the
    closest that do not fit; the user's own configuration is kept in sight when it is cut."""
    if show_all or len(rows) <= PLAN_ROWS:
        return list(rows)
    fit = [r for r in rows if r.evaluated.fits]
    over = [r for r in rows if not r.evaluated.fits]
    n_fit = min(len(fit), PLAN_ROWS - min(len(over), _MIN_OVER))
    shown = fit[:n_fit] + over[: PLAN_ROWS - n_fit]
    mine = [r for r in rows if r.yours and r not in shown]
    if mine:  # the last shown row of its kind makes room for it
        kind = [r for r in shown if r.evaluated.fits == mine[0].evaluated.fits]
        if kind:
            shown.remove(kind[-1])
        shown.append(mine[0])
        shown.sort(key=rows.index)
    return shown


def candidate_cells(row: PlanRow) -> dict[str, str]:
    """The cells of ``row`` by column header (:data:`PLAN_COLUMNS`), as plain text."""
    e = row.evaluated
    c = e.candidate
    if row.rank is None:
        rank = "yours" if row.yours else "-"
    else:
        rank = ("▶ " if row.chosen else "") + str(row.rank) + (" yours" if row.yours else "")
    allocator = allocator_text(c.allocator_config)
    ckpt = checkpointing_text(c.checkpointing)
    recompute = f"{'no' if ckpt == 'none' else ckpt} checkpointing"
    if c.memory_budget is not None:  # a compiled model: torch.compile's budget in its place
        ckpt = recompute = f"compile budget {c.memory_budget:g}"
    offload = offload_text(c.offload, c.offload_checkpoints)
    if offload:  # what waits in host memory goes with what is recomputed
        ckpt, recompute = f"{ckpt}, {offload}", f"{recompute}, {offload}"
    settings = [c.precision, recompute, c.optimizer]
    if c.allocator_config:
        settings.append(allocator)
    return {
        "rank": rank,
        "micro x accum.": f"{c.micro_batch} x {c.accumulation}",
        "precision": c.precision,
        "checkpointing": ckpt,
        "optimizer": c.optimizer,
        "allocator": allocator,
        SETTINGS_COLUMN: ", ".join(settings),
        "needs": format_bytes(e.footprint) + (f" {FREED_MARK}" if e.runs_in is not None else ""),
        "step ms": ms_text(e.step_seconds),
        "samples/s": rate_text(e.samples_per_second),
        "tokens/s": rate_text(e.tokens_per_second),
        "bound": e.bound,
        "fits": "✓" if e.fits else "✗",
    }


def plan_columns(plan: Plan, rows: list[PlanRow]) -> list[tuple[str, bool]]:
    """The columns of ``rows``' table: tokens/s only for text models, the allocator only when
    a row changes it."""
    tokens = has_tokens(plan)
    allocator = any(r.evaluated.candidate.allocator_config for r in rows)
    return [
        c
        for c in PLAN_COLUMNS
        if (c[0] != TOKENS_COLUMN or tokens) and (c[0] != ALLOCATOR_COLUMN or allocator)
    ]


def compact_columns(columns: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """``columns`` with the settings (precision, checkpointing, optimizer, allocator) in one
    column, where it was, for a narrow terminal."""
    out: list[tuple[str, bool]] = []
    for column in columns:
        if column[0] not in SETTINGS:
            out.append(column)
        elif (SETTINGS_COLUMN, False) not in out:
            out.append((SETTINGS_COLUMN, False))
    return out


def has_tokens(plan: Plan) -> bool:
    """Whether any candidate knows its tokens a second (text models): the column is shown."""
    return any(e.tokens_per_second is not None for e in plan.candidates)


def _speed(e: Evaluated) -> str:
    text = f"{ms_text(e.step_seconds)} ms a step, {rate_text(e.samples_per_second)} samples/s"
    if e.tokens_per_second is not None:
        text += f" ({rate_text(e.tokens_per_second)} tokens/s)"
    return text


def chosen_lines(plan: Plan) -> tuple[str, list[str]]:
    """The chosen plan in words: a headline, and the changes to the user's configuration (one
    a line; a single line saying so when there are none). Only for a plan that fits."""
    c = plan.chosen
    if c is None:
        raise ValueError("chosen_lines needs a plan that fits")
    needs = f"It needs {format_bytes(c.needed)} of the {format_bytes(plan.usable)} usable"
    if c.runs_in is not None:
        needs = (
            f"It runs in {format_bytes(c.runs_in)} of the {format_bytes(plan.usable)} usable once "
            f"the allocator has freed its cache ({_times(c.cache_frees)}, in its first steps; "
            f"{format_bytes(c.needed)} with its cache kept)"
        )
    head = f"Chosen: {c.candidate.describe()}. {needs}; {_speed(c)}."
    base = plan.baseline
    if base is not None and base.candidate != c.candidate:
        if base.fits:
            ratio = c.samples_per_second / base.samples_per_second if base.samples_per_second else 0
            head += (
                f" Your configuration fits too ({format_bytes(base.needed)}, {_speed(base)});"
                f" the chosen one is predicted {ratio:.2f}x its throughput."
            )
        else:
            head += (
                f" Your configuration needs {format_bytes(base.needed)}: "
                f"{format_bytes(base.needed - plan.usable)} more than the usable memory."
            )
    changes = list(c.changes)
    if not changes:
        changes = ["nothing: your configuration is the fastest that fits"]
    return head, changes


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def needs_caption(plan: Plan, rows: list[PlanRow]) -> str:
    """What the ``needs`` column means: :data:`UNITS_CAPTION`, and the mark of a step that
    runs in less than it reserves running free when one is shown."""
    if any(r.evaluated.runs_in is not None for r in rows):
        return (
            f"needs: {UNITS_CAPTION}; {FREED_MARK}: runs in that only by the allocator freeing "
            "its cache in the first steps"
        )
    return f"needs: {UNITS_CAPTION}"


def nothing_fits_lines(plan: Plan) -> tuple[str, list[str]]:
    """A plan that nothing fits: the headline (the smallest configuration and how far over it
    is), and what would make it fit (``Plan.would_fit``)."""
    head = (
        f"Nothing fits the budget of {budget_text(plan)}: every configuration memfit "
        "weighed needs more."
    )
    small = plan.smallest
    if small is not None:
        head += (
            f" The smallest, {small.candidate.describe()}, needs {format_bytes(small.needed)}: "
            f"{format_bytes(plan.shortfall)} over."
        )
    would = list(plan.would_fit) or ["a GPU with more memory, or a smaller model or batch"]
    return head, would


def plan_footer(plan: Plan, shown: int, over_shown: bool) -> list[str]:
    """The lines under the table: rows left out, the budget (``over_shown``: the table has
    rows that do not fit, under a budget line), the step times' source, the search's size."""
    lines: list[str] = []
    hidden = len(plan.candidates) - shown
    if hidden > 0:
        lines.append(f"{hidden} more candidates not shown; --all (show_all=True) shows them all.")
    if over_shown:
        budget = "the rows under the budget line need more than the usable memory"
    else:
        budget = "every row shown fits"
    lines.append(f"Budget {budget_text(plan)}; {budget}.")
    source = f" (calibration: {plan.calibration})" if plan.calibration else ""
    lines.append(
        f"Step times: predicted from the traced ops{source}; they rank the candidates and "
        "are not exact."
    )
    lines.append(
        f"{len(plan.candidates)} candidates weighed ({plan.traces} traced, the rest replayed) "
        f"in {plan.seconds:.1f} s. needs = peak reserved + memory outside PyTorch's allocator."
    )
    return lines
