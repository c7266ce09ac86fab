"""``batch_held``: the step's caller holds its whole batch on the GPU while the step runs, as a
training loop that moves its batch to the GPU and then calls the step does (and as the step
``memfit.apply`` returns is given it). memfit's own loop lets each micro-batch's inputs go after
its forward instead."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tiny_gpt2 import tiny_gpt2, token_batch
from torch import nn

import memfit
from memfit._events import Category
from memfit._gpus import resolve_gpu
from memfit.planner._search import shortened
from memfit.trace import trace_workload
from memfit.workload import held_batch_on, held_batch_sizes, make_workload


def _convnet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 32 * 32, 10)
    )


def _images(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))


def _loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch[0]), batch[1])


def _estimate(**settings: object) -> memfit.Estimate:
    settings = {"batch_size": 8, **settings}
    return memfit.estimate(_convnet, batch_of=_images, loss_fn=_loss, **settings)  # type: ignore[arg-type]


def test_the_whole_batch_is_held_through_every_step() -> None:
    w = make_workload(
        _convnet, batch_of=_images, batch_size=8, loss_fn=_loss, accumulation=3, batch_held=True
    )
    images, labels = 8 * 3 * 32 * 32 * 4, 8 * 8
    assert held_batch_sizes(w) == [3 * images, 3 * labels]  # the three micro-batches' batch
    trace = trace_workload(w, resolve_gpu("h200"))
    held = [
        e
        for e in trace.events
        if e.kind == "alloc" and trace.infos[e.info].op == "batch held by the caller"
    ]
    assert [e.size for e in held] == [3 * images, 3 * labels]
    assert all(trace.infos[e.info].category is Category.INPUT for e in held)
    assert not any(e.kind == "free" and e.block in {h.block for h in held} for e in trace.events)
    assert held_batch_sizes(dataclasses.replace(w, batch_held=False)) == []


def test_a_held_batch_adds_its_bytes_where_the_step_peaks_in_backward() -> None:
    plain = _estimate(accumulation=2)
    held = _estimate(accumulation=2, batch_held=True)
    micro = 8 * 3 * 32 * 32 * 4 + 8 * 8
    # the two micro-batches held, less the one memfit's loop copies in and the conv saves
    # for backward: held, that micro-batch is a slice of the caller's batch
    assert held.peak_allocated - plain.peak_allocated == pytest.approx(micro, abs=4096)
    assert held.peak_allocated > plain.peak_allocated
    assert held.workload.batch_held and not plain.workload.batch_held
    assert any("holds its whole batch on the GPU" in n for n in held.notes)
    assert not any("holds its whole batch" in n for n in plain.notes)


def _step_inputs(trace: object) -> list[tuple[str, int]]:
    """The allocations of the steps' input phases, less the held batch: (op, bytes)."""
    out = []
    for e in trace.events[trace.steps_start :]:  # type: ignore[attr-defined]
        info = trace.infos[e.info] if e.info is not None else None  # type: ignore[attr-defined]
        held = info is not None and info.op == "batch held by the caller"
        if e.kind == "alloc" and info is not None and info.phase.endswith(".input") and not held:
            out.append((info.op, e.size))
    return out


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_a_micro_batch_of_a_held_batch_is_a_slice_of_it(precision: str) -> None:
    # memfit.apply's step cuts its micro-batches from the batch it is given: views, no copy
    # (a trace that copied each one in put ResNet-50 3.8% over its estimate in reserved)
    w = make_workload(
        _convnet,
        batch_of=_images,
        batch_size=8,
        loss_fn=_loss,
        accumulation=3,
        precision=precision,
    )
    gpu = resolve_gpu("h200")
    assert _step_inputs(trace_workload(w, gpu))  # memfit's loop copies each micro-batch in
    assert _step_inputs(trace_workload(dataclasses.replace(w, batch_held=True), gpu)) == []


def test_a_pure_bf16_step_casts_each_micro_batch_of_the_held_batch() -> None:
    # the caller holds its batch as made (fp32 images); each micro-batch is cast as it runs
    w = make_workload(
        _convnet,
        batch_of=_images,
        batch_size=8,
        loss_fn=_loss,
        accumulation=2,
        precision="bf16",
        batch_held=True,
    )
    images, labels = 8 * 3 * 32 * 32 * 4, 8 * 8
    assert held_batch_sizes(w) == [2 * images, 2 * labels]
    copies = _step_inputs(trace_workload(w, resolve_gpu("h200")))
    assert [size for _, size in copies] == [images // 2] * len(copies) and copies


def test_a_held_batch_is_one_tensor_per_leaf_cut_into_the_micro_batches() -> None:
    w = make_workload(
        _convnet, batch_of=_images, batch_size=8, loss_fn=_loss, accumulation=3, batch_held=True
    )
    parts = held_batch_on(w, "cpu")
    assert len(parts) == 3 and all(p[0].shape == (8, 3, 32, 32) for p in parts)
    images = {p[0].untyped_storage().data_ptr() for p in parts}
    assert len(images) == 1  # views of one tensor, as a caller's batch
    whole = parts[0][0].untyped_storage().nbytes() + parts[0][1].untyped_storage().nbytes()
    assert whole == sum(held_batch_sizes(w))
    assert held_batch_on(dataclasses.replace(w, batch_held=False), "cpu") == []


def test_a_short_trace_of_the_planner_holds_the_whole_steps_batch() -> None:
    w = make_workload(tiny_gpt2, token_batch, accumulation=8, batch_held=True, steps=2)
    short = shortened(w, 2)
    assert short.accumulation == 2 and short.held_micro_batches == 8
    assert held_batch_sizes(short) == held_batch_sizes(w)
    assert shortened(short, 1).held_micro_batches == 8  # shortened again: still the step's


def _plan(**options: object) -> memfit.Plan:
    return memfit.plan(
        _convnet,
        batch_of=_images,
        loss_fn=_loss,
        budget="1GiB",
        global_batch=16,
        precisions=["fp32"],
        checkpointing=[False],
        optimizers=["adamw"],
        offloads=(),
        workers=1,
        **options,  # type: ignore[arg-type]
    )


def test_the_planner_counts_the_batch_the_applied_step_is_given() -> None:
    plan = _plan()
    assert plan.chosen is not None
    settings = plan.chosen.candidate.settings()
    held = _estimate(**{**settings, "batch_held": True})
    assert plan.chosen.peak_allocated == held.peak_allocated
    # said where it counts, and off when asked
    assert any("the whole batch the step is given" in n for n in plan.notes)
    free = _plan(batch_held=False)
    assert free.chosen is not None and free.chosen.peak_allocated < plan.chosen.peak_allocated


def test_batch_held_must_be_a_bool() -> None:
    with pytest.raises(memfit.InvalidInputError, match="batch_held=1 is not True or False"):
        _estimate(batch_held=1)
