"""What a notebook shows for memfit's results: ``_repr_html_`` of an estimate, a validation, a
plan, a batch-size search and a snapshot report (``memfit.report._notebook``), and their short
plain ``repr``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from plan_data import fitting_plan, nothing_fits_plan
from snapshot_data import check_html
from transformers import BertConfig, BertForMaskedLM

import memfit
import memfit.snapshot as ms
from memfit._display import HTML_KINDS
from memfit._units import format_bytes
from memfit.estimator import Estimate, Measurement, Validation, Versions
from memfit.report import NOTEBOOK_RENDERERS
from memfit.report._notebook import ROOT_CLASS, scope_css
from memfit.report._text import verdict_text
from memfit.runtime._bs_trials import Trial

Factory = Callable[..., Estimate]
SNAPSHOT = Path(__file__).parents[1] / "snapshot" / "data" / "all.pickle.gz"


def _fragment(html: str | None, kind: str) -> str:
    """``html`` checked as a notebook fragment of ``kind``: one scoped, well-formed ``<div>``
    that loads nothing from anywhere."""
    assert html is not None
    assert html.startswith(f'<div class="{ROOT_CLASS} memfit-{kind}">')
    assert html.endswith("</div>")
    assert "<html" not in html and "<body" not in html and "<!DOCTYPE" not in html
    check_html(html)
    assert "http://" not in html and "https://" not in html
    style = re.search(r"<style>(.*?)</style>", html, re.S)
    assert style is not None
    for selectors in re.findall(r"([^{}]+)\{", style.group(1)):
        for selector in selectors.split(","):
            assert selector.strip().startswith(f".{ROOT_CLASS}"), selector
    return html


def test_every_kind_has_a_renderer() -> None:
    assert set(NOTEBOOK_RENDERERS) == set(HTML_KINDS)


def test_estimate_shows_the_peaks_the_verdict_the_chart_and_the_notes(
    estimate_factory: Factory,
) -> None:
    est = estimate_factory(gpu="h100", notes=["rotary positions <assumed>"])
    html = _fragment(est._repr_html_(), "estimate")
    for size in (est.peak_allocated, est.peak_reserved, est.non_pytorch, est.total):
        assert format_bytes(size) in html
    verdict = verdict_text(est)
    assert verdict is not None and verdict.fits
    assert "Fits on H100" in html and "verdict fits" in html
    assert "<svg" in html and "<polyline" in html
    assert "transformer.h.11.mlp.c_fc" in html and "aten::addmm" in html
    assert "rotary positions &lt;assumed&gt;" in html


def test_estimate_that_does_not_fit_says_so_and_without_a_gpu_has_no_verdict(
    estimate_factory: Factory,
) -> None:
    short = _fragment(estimate_factory(gpu="8GiB")._repr_html_(), "estimate")
    assert "Does not fit on" in short and "verdict short" in short
    none = _fragment(estimate_factory()._repr_html_(), "estimate")
    assert "verdict" not in none.split("</style>")[1]


def test_a_real_estimate_shows_in_a_notebook() -> None:
    est = memfit.estimate(lambda: torch.nn.Linear(64, 64), torch.randn(4, 64), gpu="1GiB")
    html = _fragment(est._repr_html_(), "estimate")
    assert format_bytes(est.peak_allocated) in html and "Fits on 1GiB GPU" in html
    assert len(repr(est).splitlines()) == 1


def test_plan_shows_the_answer_the_ranked_table_and_the_budget_line() -> None:
    plan = fitting_plan()
    html = _fragment(plan._repr_html_(), "plan")
    assert plan.chosen is not None
    assert "Plan for gpt2 in 24.00 GiB" in html
    assert f"Chosen: {plan.chosen.candidate.describe()}" in html
    assert "What changes against your configuration:" in html
    assert "<tr class='chosen'><td class='num'>▶ 1</td>" in html
    assert html.count("<tr class='budget'>") == 1 and format_bytes(plan.usable) in html
    assert html.index("class='budget'") < html.index("class='over'")
    assert format_bytes(plan.chosen.footprint) in html
    for note in plan.notes:
        assert note in html


def test_plan_that_nothing_fits_says_what_would() -> None:
    plan = nothing_fits_plan()
    html = _fragment(plan._repr_html_(), "plan")
    assert "Nothing fits the budget" in html and "verdict short" in html
    assert "What would fit:" in html
    for item in plan.would_fit:
        assert item in html


def test_plan_repr_is_one_short_line() -> None:
    for plan in (fitting_plan(), nothing_fits_plan()):
        text = repr(plan)
        assert len(text.splitlines()) == 1 and len(text) < 300
        assert text.startswith("Plan(model='gpt2', budget=")
    assert "chosen='micro-batch 8 x 4" in repr(fitting_plan())
    assert "chosen=None, shortfall=" in repr(nothing_fits_plan())


def _validation(host: Versions) -> Validation:
    def linear() -> torch.nn.Module:
        return torch.nn.Linear(64, 64)

    est = memfit.estimate(linear, torch.randn(4, 64), gpu="1GiB")
    est = dataclasses.replace(est, versions=Versions(torch="2.14.1+cpu", transformers="5.24.0"))
    measured = Measurement(
        peak_allocated=est.peak_allocated * 2,
        peak_reserved=est.peak_reserved,
        setup_allocated=0,
        nvml_process=est.peak_reserved + 700 * 2**20,
        context=700 * 2**20,
        step_seconds=0.01,
        gpu_name="NVIDIA H200",
        torch_version="2.14.1+cu130",
        allocator_config="",
        versions=host,
        notes=("rank 0 alone",),
    )
    return Validation(est, measured)


def test_validation_shows_each_figure_with_its_error_and_the_versions() -> None:
    result = _validation(Versions(torch="2.14.1+cu130", transformers="5.17.0"))
    html = _fragment(result._repr_html_(), "validation")
    assert "estimate vs NVIDIA H200, torch 2.14.1+cu130" in html
    assert "-50.00%" in html and "+0.00%" in html
    assert format_bytes(result.estimate.peak_allocated * 2) in html
    assert "Measured: rank 0 alone." in html
    assert html.count(">differs<") == 1 and "Memory depends on library versions" in html
    same = _fragment(_validation(result.estimate.versions)._repr_html_(), "validation")
    assert ">differs<" not in same and "Memory depends" not in same


def test_validation_repr_is_one_short_line() -> None:
    text = repr(_validation(Versions()))
    assert len(text.splitlines()) == 1 and len(text) < 300
    assert "model='linear', gpu='NVIDIA H200'" in text and "(-50.00%)" in text


def _tiny_bert() -> torch.nn.Module:
    config = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=256,
    )
    return BertForMaskedLM(config)


def _tokens(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (n, 64))
    return {"input_ids": ids, "labels": ids}


def test_batch_size_search_shows_the_answer_the_chart_and_every_estimate() -> None:
    result = memfit.find_batch_size(_tiny_bert, _tokens, gpu="h100", confirm=False, max_batch=16)
    html = _fragment(result._repr_html_(), "batch-size")
    assert f"Largest batch size: {result.batch_size} (the max_batch limit)" in html
    assert format_bytes(result.budget) in html and format_bytes(result.gpu_total) in html
    assert "<svg" in html and "<polyline" in html
    assert html.count("<tr") == len(result.estimates) + 1  # and the header
    for point in result.estimates:
        assert f"<td>{point.batch_size}</td><td>{format_bytes(point.peak_reserved)}</td>" in html
    assert "GPU trials" not in html and "Note:" not in html


def test_batch_size_search_with_trials_and_a_cache_freeing_answer() -> None:
    result = memfit.find_batch_size(_tiny_bert, _tokens, gpu="h100", confirm=False, max_batch=16)
    trial = Trial(16, True, "fits", 3 * 2**30, 3 * 2**30 + 2**20, 2 * 2**30, 4.2)
    tried = dataclasses.replace(result, confirmed=True, trials=[trial], predicted_alloc_retries=3)
    html = _fragment(tried._repr_html_(), "batch-size")
    assert "confirmed in 1 GPU trial(s)" in html
    assert "batch 16: fits, measured peak reserved 3.00 GiB (predicted 3.00 GiB), 4.2 s" in html
    assert "Note: batch 16 fits only because the allocator frees its cache" in html


def test_snapshot_report_shows_the_peaks_the_charts_and_the_what_ifs() -> None:
    rep = ms.report(SNAPSHOT)
    html = _fragment(rep._repr_html_(), "snapshot")
    assert format_bytes(rep.peak_allocated) in html and format_bytes(rep.peak_reserved) in html
    assert "Replay check:" in html and "Segments at the peak reserved" in html
    assert html.count("<svg") == 2  # the timeline and the segments
    assert "What if" in html and rep.recommendation.split(":")[0] in html
    assert len(repr(rep).splitlines()) == 1


def test_scope_css_keeps_every_rule_inside_the_fragment() -> None:
    css = ":root { color-scheme: light; }\nbody, main { margin: 0; }\nh1, td.num { x: 1; }"
    assert scope_css(css, ".r").splitlines() == [
        ".r { color-scheme: light; }",
        ".r { margin: 0; }",
        ".r h1, .r td.num { x: 1; }",
    ]
    with pytest.raises(ValueError, match="no at-rules"):
        scope_css("@media print { h1 { x: 1; } }")
