"""docs/accuracy.md is what ``benchmarks/accuracy_page.py`` makes of the committed results now.

The script only reads JSON, so the whole page is regenerated here in a second or two: a change
to a results file, to a source's declaration or to the tables shows as a difference, and the
page cannot drift from the results it cites.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def modules() -> Iterator[tuple[ModuleType, ModuleType]]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module("accuracy_page"), importlib.import_module("accuracy_tables")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_every_declared_source_is_a_file_under_the_results(modules):
    page, _ = modules
    paths = [source.path for source in page.SOURCES]
    missing = [source.path for source in page.SOURCES if not source.file.is_file()]
    assert not missing, f"declared but not in benchmarks/results/: {missing}"
    assert len(set(paths)) == len(paths), "a source is declared twice"


def test_the_committed_page_is_what_the_results_make(modules):
    page, tables = modules
    assert page.PAGE.read_text() == tables.render(page.read_all(page.SOURCES), page.TOPICS), (
        "docs/accuracy.md is stale: run python benchmarks/accuracy_page.py"
    )


def test_every_table_names_the_files_its_numbers_came_from(modules):
    page, _ = modules
    text = page.PAGE.read_text()
    sections = text.split("\n## ")[2:]  # the topics, after the title and the summary
    assert sections
    for section in sections:
        assert "Sources:" in section and "`benchmarks/results/" in section, section[:80]


def test_a_missing_source_stops_with_its_path_and_the_fix(modules):
    page, _ = modules
    gone = page.Source("2026-01-01-h200-gone/measured.json", "validation", page.measured)
    with pytest.raises(page.MissingResultError, match=r"2026-01-01-h200-gone/measured\.json.*"):
        page.read_all([gone])


def test_check_passes_on_the_committed_page(modules):
    page, _ = modules
    assert page.main(["--check"]) == 0


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "exact"), (3.4821, "+3.48%"), (-0.0002353, "-0.0002%"), (0.005, "+0.005%")],
)
def test_errors_keep_two_decimals_and_show_the_first_digit_below_a_hundredth(modules, value, text):
    _, tables = modules
    assert tables.percent(value) == text


def test_the_op_sweep_section_counts_matched_of_the_cases_both_sides_ran(modules):
    del modules  # the benchmarks folder on the path
    formats = importlib.import_module("accuracy_formats")
    ops = importlib.import_module("accuracy_ops")
    cases = {
        "add||fp32|forward|0": {"verdict": "matched"},
        "add||fp32|backward|0": {"verdict": "mismatched", "detail": "extra alloc: 4 (x:temp)"},
        "sort||bf16|forward|1": {"verdict": "matched"},
        "sort||bf16|forward|-": {"verdict": "not sampled", "detail": "gpu: no bf16"},
    }
    summary = {"gpu": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"}, "cases": cases}
    src = formats.Source("op/summary.json", "opsweep", ops.op_sweep_summary)
    lines = ops.op_sweep_section(formats.Read([(ops.OpSweepFile(summary), src)]), "Op sweep")
    text = "\n".join(lines)
    assert "Matched: 2 of 3 (66.7%)" in text
    assert "| fp32 | 1 of 1 (100.0%) | 0 of 1 (0.0%) |" in text
    assert "| extra alloc | 1 |" in text
    assert "| add | 1 | 1 | fp32/backward/0: extra alloc: 4 (x:temp) |" in text
    assert ops.op_sweep_section(formats.Read([]), "Op sweep") == []
