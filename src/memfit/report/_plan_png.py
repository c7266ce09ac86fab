"""Draw a plan (:class:`memfit.planner.Plan`) as a PNG: every candidate's memory against its
predicted step time, the Pareto front, the budget, the chosen one.

Memory (``footprint``: what a step needs, or what it runs in once the allocator has freed its
cache; GiB) runs along x and step time (ms) up y, so that the budget is a vertical line and
the best candidates sit low and left of it. Candidates that fit are filled dots, those
that do not hollow ones; the front (no other candidate is both smaller and faster) is a line.
The figure is made by ``_figure.new_axes`` (matplotlib, an optional extra; never pyplot).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfit._units import GiB, format_bytes
from memfit.report._chart import ALLOCATED_COLOR, CAPACITY_COLOR, RESERVED_COLOR
from memfit.report._figure import new_axes
from memfit.report._paths import PathLike, output_path

if TYPE_CHECKING:
    from memfit.planner import Evaluated, Plan

__all__ = ["write_plan_png"]

_FIT_COLOR = ALLOCATED_COLOR
_OVER_COLOR = "#9e9e9e"
_FRONT_COLOR = RESERVED_COLOR
_CHOSEN_COLOR = "#2e7d32"


def _xy(points: list[Evaluated]) -> tuple[list[float], list[float]]:
    return [e.footprint / GiB for e in points], [e.step_seconds * 1e3 for e in points]


def _candidates(ax: Any, plan: Plan) -> None:
    """The candidates in two styles, and the front as a line through its points."""
    fit = [e for e in plan.candidates if e.fits]
    over = [e for e in plan.candidates if not e.fits]
    if fit:
        ax.scatter(*_xy(fit), s=28, color=_FIT_COLOR, zorder=3, label="fits")
    if over:
        ax.scatter(
            *_xy(over),
            s=28,
            facecolors="none",
            edgecolors=_OVER_COLOR,
            zorder=3,
            label="does not fit",
        )
    front = plan.pareto()
    if len(front) > 1:
        ax.plot(
            *_xy(front),
            drawstyle="steps-post",
            color=_FRONT_COLOR,
            linewidth=1.4,
            zorder=2,
            label="Pareto front (least memory for its speed)",
        )


def _budget(ax: Any, plan: Plan) -> None:
    ax.axvline(
        plan.budget / GiB,
        color=CAPACITY_COLOR,
        linewidth=1.2,
        label=f"budget {format_bytes(plan.budget)}",
    )
    ax.axvline(
        plan.usable / GiB,
        color=CAPACITY_COLOR,
        linestyle=":",
        linewidth=1.2,
        label=f"usable {format_bytes(plan.usable)} ({plan.margin:.0%} kept free)",
    )


def _mark(ax: Any, e: Evaluated, text: str, color: str, offset: tuple[int, int]) -> None:
    x, y = e.footprint / GiB, e.step_seconds * 1e3
    ax.scatter([x], [y], s=110, marker="*", color=color, zorder=5)
    ax.annotate(
        text,
        (x, y),
        textcoords="offset points",
        xytext=offset,
        ha="right" if offset[0] < 0 else "left",
        fontsize=8.5,
        color=color,
        arrowprops={"arrowstyle": "-", "color": color, "linewidth": 0.7},
    )


def _title(plan: Plan) -> str:
    """Two lines: the model, budget and search; then the answer."""
    head = (
        f"{plan.model} in {format_bytes(plan.budget)} (global batch {plan.global_batch}): "
        f"{len(plan.candidates)} candidates"
    )
    if plan.chosen is None:
        return f"{head}\nnothing fits: the smallest is {format_bytes(plan.shortfall)} over"
    return f"{head}\nchosen: {plan.chosen.candidate.describe()}"


def write_plan_png(plan: Plan, path: PathLike) -> Path:
    """Write ``plan``'s candidates, memory against predicted step time, to ``path`` (a PNG);
    return the path written."""
    target = output_path(path, "plan plot", ".png")
    fig, ax = new_axes(9.0, 5.5, 130)
    _candidates(ax, plan)
    _budget(ax, plan)
    if plan.chosen is not None:
        _mark(ax, plan.chosen, "chosen", _CHOSEN_COLOR, (10, -16))
    elif plan.smallest is not None:
        _mark(ax, plan.smallest, "smallest", CAPACITY_COLOR, (10, -16))
    base = plan.baseline
    if base is not None and (plan.chosen is None or base.candidate != plan.chosen.candidate):
        _mark(ax, base, "yours", "#555555", (-12, 12))
    ax.set_xlabel("memory needed, GiB (2^30 bytes)")
    ax.set_ylabel("predicted step time, ms")
    ax.set_title(_title(plan), fontsize=11)
    ax.set_xlim(left=0)
    top = max((e.step_seconds * 1e3 for e in plan.candidates), default=1.0)
    ax.set_ylim(0, top * 1.12)  # room above the slowest for its label
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)
    fig.savefig(target, format="png")
    return target
