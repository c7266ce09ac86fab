"""The fixes of an out-of-memory failure, from its facts alone: savings, ranking, changes."""

from __future__ import annotations

import dataclasses

from memfit.advice import (
    CHECKPOINTING,
    MIXED_PRECISION,
    Change,
    Failure,
    Fix,
    ModelInfo,
    StepSettings,
    WhatIf,
    does_not_fit_message,
    failure_fixes,
    optimizer_step_advice,
    rank,
    smaller_step_advice,
)

GiB = 1 << 30

MODEL = ModelInfo(
    parameter_bytes=4 * GiB,
    fp32_bytes=4 * GiB,
    optimizer="AdamW",
    optimizer_fused=None,
    checkpointing=False,
    huggingface=True,
)
FAILURE = Failure(
    shortfall=1 * GiB,
    working_set=44 * GiB,
    training=True,
    in_optimizer_step=False,
    autocast=False,
    expandable=False,
    stranded=2 * GiB,
    command="python train.py",
    model=MODEL,
)


def test_fixes_are_ranked_by_saving_and_name_their_setting() -> None:
    fixes, notes = failure_fixes(FAILURE)
    assert [(f.saving, f.change) for f in fixes] == [
        (int(0.6 * 44 * GiB), Change("activation_checkpointing", True)),
        (22 * GiB, Change("microbatches", 2)),
        (int(0.3 * 44 * GiB) - 2 * GiB, Change("precision", "bf16-mixed")),
        (2 * GiB, Change("allocator_config", "expandable_segments:True")),
    ]
    assert all(f.covers for f in fixes) and notes == []
    assert "change" not in fixes[0].to_dict()  # the report's JSON is unchanged


def test_a_replayed_setting_is_measured_not_bounded() -> None:
    rows = (
        WhatIf("expandable_segments:True", False, 9 * GiB, 8 * GiB, 3 * GiB, None, None),
        WhatIf("max_split_size_mb:128", False, 11 * GiB, 8 * GiB, 1 * GiB, None, None),
    )
    fixes, _ = failure_fixes(dataclasses.replace(FAILURE, replayed=rows))
    alloc = next(f for f in fixes if f.name.startswith("Allocator"))
    assert alloc.saving == 3 * GiB and "replay of the recorded trace" in alloc.basis
    nothing = (WhatIf("default", False, 12 * GiB, 8 * GiB, -GiB, None, None),)
    fixes, notes = failure_fixes(dataclasses.replace(FAILURE, replayed=nothing))
    assert not any(f.name.startswith("Allocator") for f in fixes)
    assert "No allocator setting lowers" in notes[0]


def test_inference_gets_bf16_weights_and_a_smaller_batch() -> None:
    fixes, _ = failure_fixes(dataclasses.replace(FAILURE, training=False, stranded=None))
    assert [f.change for f in fixes] == [
        Change("microbatches", 2),
        Change("precision", "bf16"),
    ]
    assert fixes[1].saving == 2 * GiB + MIXED_PRECISION.of(44 * GiB)


def test_in_the_optimizer_step_the_fused_optimizer_is_a_memfit_setting() -> None:
    fixes, _ = failure_fixes(dataclasses.replace(FAILURE, in_optimizer_step=True, stranded=None))
    assert [f.change for f in fixes] == [Change("optimizer", "adamw-fused")]
    other = dataclasses.replace(MODEL, optimizer="Adafactor")
    failure = dataclasses.replace(FAILURE, in_optimizer_step=True, stranded=None, model=other)
    assert [f.change for f in failure_fixes(failure)[0]] == [None]


def test_rank_puts_unknown_savings_last_and_keeps_ties_in_order() -> None:
    def fix(name: str, saving: int | None) -> Fix:
        return Fix(name, saving, "", None, (), "")

    ranked = rank([fix("a", None), None, fix("b", 1), fix("c", 5), fix("d", 1)])
    assert [f.name for f in ranked] == ["c", "b", "d", "a"]


def test_the_advice_in_errors_uses_the_measured_shares() -> None:
    assert f"~{CHECKPOINTING.share:.0%} of the activations" in smaller_step_advice(None)
    assert "~6.00 GiB, 60% of the working set" in smaller_step_advice(10 * GiB)
    assert "~3.00 GiB, 30% of the working set" in smaller_step_advice(10 * GiB)
    assert "torch.optim.SGD(..., fused=True)" in optimizer_step_advice("SGD")
    message = does_not_fit_message("A100", 1, 49 * GiB, GiB, 52 * GiB, 40 * GiB)
    assert message.startswith("The step does not fit A100 even at batch size 1: the estimate")
    assert "activation_checkpointing=True" in message


def test_nothing_fits_adds_up_and_suggests_only_what_is_not_in_effect() -> None:
    message = does_not_fit_message(
        "A100",
        1,
        49 * GiB,
        GiB,
        52 * GiB,
        40 * GiB,
        StepSettings(precision="bf16-mixed", activation_checkpointing=True),
    )
    # the total is the sum of its parts; the free-running peak is said apart
    assert "the estimate is 50.00 GiB (49.00 GiB reserved" in message
    assert "52.00 GiB with memory to spare, plus 1.00 GiB of CUDA context" in message
    assert "--precision bf16-mixed" not in message and "--checkpointing" not in message
    assert "precision='bf16', --precision bf16" in message
    assert "optimizer='sgd', --optimizer sgd" in message
