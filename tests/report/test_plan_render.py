"""Rendering a plan (memfit.planner.Plan): the terminal table, Markdown, the PNG, and the JSON
beside them, on hand-made plans (plan_data): one that fits, one where nothing fits."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from plan_data import fitting_plan, many_plan, nothing_fits_plan
from rich.console import Console

from memfit.planner import Plan
from memfit.report import plan_markdown, plan_renderable, render_plan, write_plan_png
from memfit.report._plan_text import PLAN_ROWS, plan_rows, shown_rows


def _text(plan: Plan, width: int = 200, show_all: bool = False) -> str:
    console = Console(width=width, record=True, color_system=None)
    render_plan(plan, console, show_all=show_all)
    return console.export_text()


def test_the_chosen_plan_comes_first_in_words_with_its_changes():
    text = _text(fitting_plan())
    head = " ".join(text[: text.index("Plan for gpt2")].split())
    assert head.startswith("Chosen: micro-batch 8 x 4, bf16-mixed, selective checkpointing")
    assert "20.00 GiB of the 22.80 GiB usable" in head
    assert "What changes against your configuration: • micro-batch 8" in head
    assert "precision bf16-mixed (was fp32)" in head
    assert "global batch stays 32" in head
    assert "Your configuration needs 40.00 GiB" in head


def test_the_table_ranks_fitting_rows_fastest_first_then_the_budget_then_the_rest():
    text = _text(fitting_plan())
    lines = text.splitlines()
    header = next(line for line in lines if "step ms" in line)
    for column in ("rank", "precision", "checkpointing", "optimizer", "allocator", "needs"):
        assert column in header
    for column in ("samples/s", "tokens/s", "bound", "fits"):
        assert column in header
    chosen = next(line for line in lines if "▶ 1" in line)
    assert "20.00 GiB" in chosen and "420" in chosen and "✓" in chosen and "78,019" in chosen
    budget = next(i for i, line in enumerate(lines) if line.strip().startswith("budget"))
    assert "22.80 GiB" in lines[budget]
    rows = [line for line in lines if "GiB" in line and ("✓" in line or "✗" in line)]
    assert [("✓" in r) for r in rows] == [True] * 5 + [False] * 3
    assert lines.index(rows[4]) < budget < lines.index(rows[5])
    assert "yours" in rows[-1] and "40.00 GiB" in rows[-1]
    assert "expandable" in text  # the allocator column, shortened
    assert "GiB = 2^30 bytes" in text  # binary units, said
    assert "(calibration: H200" in text  # the calibration's source
    assert "Step times assume the GPU runs nothing else." in text  # the notes


def test_nothing_fits_says_so_with_the_smallest_and_what_would_fit():
    text = _text(nothing_fits_plan())
    head = " ".join(text[: text.index("Plan for gpt2")].split())
    assert "Nothing fits the budget of 4.00 GiB, 3.80 GiB usable" in head
    assert "The smallest, micro-batch 2 x 16, bf16, full checkpointing" in head
    assert "needs 12.00 GiB: 8.20 GiB over" in head
    assert "What would fit: • sequences of 256 tokens" in head
    assert "a GPU with at least 12.00 GiB" in head
    assert "▶" not in text and "✓" not in text


def test_a_narrow_terminal_puts_the_settings_in_one_column_and_keeps_every_row():
    wide, narrow = _text(fitting_plan(), 200), _text(fitting_plan(), 80)
    assert "settings" not in wide and "checkpointing" in wide
    assert "settings" in narrow
    assert all(len(line) <= 80 for line in narrow.splitlines())
    for needed in ("20.00 GiB", "40.00 GiB", "22.80 GiB", "▶ 1", "yours"):
        assert needed in narrow


def test_at_most_15_rows_by_default_with_some_that_do_not_fit_and_all_on_request():
    plan = many_plan()
    rows = shown_rows(plan_rows(plan))
    assert len(rows) == PLAN_ROWS
    assert sum(not r.evaluated.fits for r in rows) == 3
    assert rows[0].chosen and any(r.yours for r in rows)  # the user's row is kept in sight
    text = _text(plan)
    assert "35 more candidates not shown; --all" in text
    header = next(line for line in text.splitlines() if "step ms" in line)
    assert "tokens/s" not in header and "allocator" not in header  # nothing to show in them
    everything = _text(plan, show_all=True)
    assert "not shown" not in everything
    assert everything.count("✓") + everything.count("✗") == 50


def test_plan_renderable_is_what_render_plan_prints():
    console = Console(width=200, record=True, color_system=None)
    console.print(plan_renderable(fitting_plan(), width=200))
    assert console.export_text() == _text(fitting_plan())


def test_markdown_has_the_answer_and_a_table_with_the_chosen_row_in_bold():
    md = plan_markdown(fitting_plan())
    assert md.startswith("## Plan for gpt2 in 24.00 GiB (global batch 32, sequence 1024)\n")
    assert "- precision bf16-mixed (was fp32)" in md
    lines = md.splitlines()
    header = next(line for line in lines if line.startswith("| rank |"))
    assert lines[lines.index(header) + 1].startswith("|---:|---|")
    table = [line for line in lines if line.startswith("| ")]
    assert len({line.count(" | ") for line in table}) == 1  # every row has every column
    assert "| **▶ 1** | **8 x 4** | **bf16-mixed** |" in md
    assert "| **budget** |" in md and "**22.80 GiB**" in md
    assert "expandable" in md and "GiB = 2^30 bytes" in md
    assert "- Step times assume the GPU runs nothing else." in md


def test_markdown_of_nothing_fits():
    md = plan_markdown(nothing_fits_plan())
    assert "Nothing fits the budget of 4.00 GiB" in md
    assert "8.20 GiB over" in md and "- sequences of 256 tokens" in md
    assert "**▶" not in md


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize("make", [fitting_plan, nothing_fits_plan], ids=["fits", "nothing-fits"])
def test_png_is_written_and_returned(tmp_path, make):
    pytest.importorskip("matplotlib")
    target = tmp_path / "plan.png"
    assert write_plan_png(make(), target) == target
    width, height = _png_size(target)
    assert width > 800 and height > 500
    assert target.stat().st_size > 10_000
    assert [p.name for p in tmp_path.iterdir()] == ["plan.png"]  # nothing beside it


def test_png_into_a_missing_folder_is_refused(tmp_path):
    from memfit import InvalidInputError

    with pytest.raises(InvalidInputError, match="does not exist"):
        write_plan_png(fitting_plan(), tmp_path / "nowhere" / "plan.png")


def test_json_round_trip_keeps_every_key():
    plan = fitting_plan()
    data = json.loads(plan.to_json())
    for key in (
        "model",
        "budget",
        "usable",
        "margin",
        "global_batch",
        "fits",
        "chosen",
        "baseline",
        "candidates",
        "pareto",
        "would_fit",
        "notes",
        "calibration",
    ):
        assert key in data
    assert data["fits"] is True and len(data["candidates"]) == 8
    assert data["chosen"]["micro_batch"] == 8 and data["chosen"]["changes"]
    assert data["candidates"][0] == data["chosen"]
    front = [data["candidates"][i] for i in data["pareto"]]
    assert [c["needed"] for c in front] == sorted(c["needed"] for c in front)
    nothing = json.loads(nothing_fits_plan().to_json())
    assert nothing["fits"] is False and nothing["chosen"] is None
    assert nothing["shortfall"] > 0 and nothing["smallest"]["needed"] == 12 * 2**30
    assert nothing["would_fit"]


def test_a_compiled_models_rows_show_its_activation_memory_budget():
    import dataclasses

    from memfit.report._plan_text import PlanRow, candidate_cells

    e = fitting_plan().candidates[0]
    compiled = dataclasses.replace(
        e, candidate=dataclasses.replace(e.candidate, checkpointing=False, memory_budget=0.5)
    )
    cells = candidate_cells(PlanRow(compiled, 1, True, False))
    assert cells["checkpointing"] == "compile budget 0.5"
    assert "compile budget 0.5" in cells["settings"] and "checkpointing" not in cells["settings"]
    eager = candidate_cells(
        PlanRow(dataclasses.replace(compiled, candidate=e.candidate), 1, True, False)
    )
    assert "compile budget" not in eager["settings"]


@pytest.mark.parametrize(
    ("share", "checkpoints", "shown"),
    [
        (0.0, False, "full"),
        (0.0, True, "full, inputs offloaded"),
        (1.0, False, "full, rest offloaded"),
        (0.5, True, "full, inputs offloaded, 50% of rest offloaded"),
    ],
)
def test_rows_that_differ_by_activation_offload_show_it(
    share: float, checkpoints: bool, shown: str
) -> None:
    # two rows that differ only in what is offloaded must not read the same
    import dataclasses

    from memfit.report._plan_text import PlanRow, candidate_cells

    e = fitting_plan().candidates[0]
    c = dataclasses.replace(
        e.candidate, checkpointing=True, offload=share, offload_checkpoints=checkpoints
    )
    cells = candidate_cells(PlanRow(dataclasses.replace(e, candidate=c), 1, True, False))
    assert cells["checkpointing"] == shown
    assert (
        cells["settings"]
        .split(", ", 1)[1]
        .startswith(shown.replace("full", "full checkpointing", 1))
    )


def test_a_chosen_step_that_runs_by_freeing_the_cache_shows_what_it_runs_in():
    import dataclasses

    plan = fitting_plan()
    assert plan.chosen is not None
    settled = dataclasses.replace(
        plan.chosen, needed=plan.usable + 2**30, runs_in=plan.usable - 2**30, cache_frees=1
    )
    plan = dataclasses.replace(plan, chosen=settled, candidates=[settled, *plan.candidates[1:]])
    text = _text(plan)
    head = " ".join(text[: text.index("Plan for gpt2")].split())
    assert "It runs in 21.80 GiB of the 22.80 GiB usable once the allocator has freed" in head
    assert "(once, in its first steps; 23.80 GiB with its cache kept)" in head
    assert "21.80 GiB ↺" in text and "↺: runs in that only by the allocator freeing" in text
    markdown = plan_markdown(plan)
    assert "21.80 GiB ↺" in markdown and "↺: runs in that only" in markdown
    assert json.loads(plan.to_json())["chosen"]["runs_in"] == plan.usable - 2**30
