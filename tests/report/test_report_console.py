"""render_estimate: what the terminal report says, in binary units."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from rich.console import Console

from memfit._events import Category
from memfit._units import GiB, MiB
from memfit.estimator._result import Estimate, Timeline
from memfit.report import render_estimate

Factory = Callable[..., Estimate]


def _text(estimate: Estimate) -> str:
    console = Console(record=True, width=120)
    render_estimate(estimate, console)
    return console.export_text()


def test_header_names_the_workload(estimate_factory: Factory) -> None:
    text = _text(estimate_factory())
    for expected in (
        "gpt2",
        "124.4M parameters",
        "batch 8 x 1024 tokens",
        "mode train",
        "precision bf16-mixed",
        "optimizer AdamW",
        "checkpointing off",
        "allocator expandable_segments:True",
    ):
        assert expected in text


def test_billions_of_parameters_and_default_allocator(estimate_factory: Factory) -> None:
    text = _text(
        estimate_factory(
            parameters=6_738_415_616, allocator_config="", activation_checkpointing=True
        )
    )
    assert "6.74B parameters" in text
    assert "allocator default" in text
    assert "checkpointing on" in text


def test_categories_largest_first_with_shares(estimate_factory: Factory) -> None:
    text = _text(estimate_factory())
    assert "At the peak" in text
    labels = ["activation", "parameter", "gradient", "temporary", "workspace"]
    positions = [text.index(f"│ {label}") for label in labels]
    assert positions == sorted(positions)
    assert "│ buffer" not in text  # empty categories are left out
    assert "5.29 GiB" in text and "640.00 MiB" in text
    total = 5 * GiB + 300 * MiB + 2 * GiB + 1 * GiB + 200 * MiB + 640 * MiB + 32 * MiB
    assert f"{100 * (5 * GiB + 300 * MiB) / total:.1f}%" in text
    assert "█" in text


def test_binary_units_caption_once(estimate_factory: Factory) -> None:
    text = _text(estimate_factory())
    assert text.count("GiB = 2^30 bytes") == 1
    assert " GB " not in text and " MB " not in text


def test_headline_sizes_say_what_they_predict(estimate_factory: Factory) -> None:
    estimate = estimate_factory()
    text = _text(estimate)
    assert "torch.cuda.max_memory_allocated()" in text
    assert "torch.cuda.max_memory_reserved()" in text
    assert "nvidia-smi" in text
    assert "CUDA context" in text
    assert "520.00 MiB" in text
    assert "8.77 GiB" in text  # total = peak reserved + non-PyTorch


def test_peak_op_module_and_phase(estimate_factory: Factory) -> None:
    text = _text(estimate_factory(peak_op="aten::bmm"))
    assert "op aten::bmm" in text
    assert "module transformer.h.11.mlp.c_fc" in text
    assert "phase step1.backward" in text


def test_verdict_fits(estimate_factory: Factory) -> None:
    text = _text(estimate_factory(gpu="h100"))
    assert "fits on H100 80GB with 70.4 GiB headroom" in text
    assert "does not fit" not in text


def test_verdict_does_not_fit(
    estimate_factory: Factory, timeline_factory: Callable[..., Timeline]
) -> None:
    estimate = estimate_factory(gpu="4090", timeline=timeline_factory(scale=3 * GiB))
    text = _text(estimate)
    assert "does not fit on RTX 4090 24GB: short by" in text
    assert estimate.gpu is not None
    needed = estimate.total - estimate.gpu.total
    assert f"short by {needed / GiB:.1f} GiB" in text


def test_verdict_colours(
    estimate_factory: Factory, timeline_factory: Callable[..., Timeline]
) -> None:
    def styled(estimate: Estimate) -> str:
        console = Console(
            file=io.StringIO(), record=True, width=120, force_terminal=True, color_system="standard"
        )
        render_estimate(estimate, console)
        return console.export_text(styles=True)

    green, red = "\x1b[1;32m", "\x1b[1;31m"
    fits = styled(estimate_factory(gpu="h100"))
    assert f"{green}fits on H100 80GB" in fits
    short = styled(estimate_factory(gpu="4090", timeline=timeline_factory(scale=3 * GiB)))
    assert f"{red}does not fit on RTX 4090 24GB" in short


def test_no_verdict_without_gpu(estimate_factory: Factory) -> None:
    text = _text(estimate_factory())
    assert "Verdict" not in text
    assert "fits on" not in text


def test_top_modules_are_capped_and_shortened(estimate_factory: Factory) -> None:
    long_name = "model.encoder." + "very_long_block_name." * 6 + "final_projection"
    modules = [(f"{long_name}{i}", (30 - i) * MiB) for i in range(14)]
    text = _text(estimate_factory(modules=modules))
    assert "Top modules at the peak" in text
    assert long_name not in text
    assert "model.encoder.very_long" in text and "final_projection0" in text
    assert "…" in text
    assert "final_projection9" in text and "final_projection10" not in text
    assert "… 4 more" in text


def test_user_strings_are_not_markup(estimate_factory: Factory) -> None:
    text = _text(
        estimate_factory(modules=[("blocks.[bold]0[/bold]", GiB)], notes=["keep [red]this[/red]"])
    )
    assert "blocks.[bold]0[/bold]" in text
    assert "keep [red]this[/red]" in text


def test_notes_are_a_bulleted_list_at_the_end(estimate_factory: Factory) -> None:
    notes = ["AdamW keeps two fp32 states per parameter.", "Reserved memory is rounded up."]
    text = _text(estimate_factory(gpu="h100", notes=notes))
    for note in notes:
        assert f"• {note}" in text
    assert text.index("Notes") > text.index("fits on")


def test_small_sizes_use_mib(
    estimate_factory: Factory, timeline_factory: Callable[..., Timeline]
) -> None:
    text = _text(estimate_factory(timeline=timeline_factory(scale=8 * MiB)))
    assert "MiB" in text


def test_prints_to_stdout_by_default(
    estimate_factory: Factory, capsys: pytest.CaptureFixture[str]
) -> None:
    render_estimate(estimate_factory(gpu="h100"))
    out = capsys.readouterr().out
    assert "At the peak" in out and "fits on H100 80GB" in out


def test_category_label_is_used(estimate_factory: Factory) -> None:
    estimate = estimate_factory()
    estimate.by_category[Category.OPTIMIZER_STATE] = 3 * GiB
    assert "optimizer state" in _text(estimate)
