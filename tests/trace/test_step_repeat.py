"""Later steps copied from step 1 (trace._repeat): the same trace as tracing every step, and
traced again whenever step 1 cannot vouch for them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace import _tracer
from memfit.workload import make_workload

H200 = resolve_gpu("h200")


def _normalized(trace: Any) -> tuple[Any, ...]:
    """Everything in a trace but block numbers (renumbered in order of appearance)."""
    order: dict[int, int] = {}
    events = []
    for e in trace.events:
        info = trace.infos[e.info] if e.info is not None else None
        what = None if info is None else (info.category, info.op, info.module, info.phase)
        events.append((e.kind, order.setdefault(e.block, len(order)), e.size, e.stream, what))
    return events, trace.phases, trace.steps_start, trace.parameters, trace.notes


def _both(model: Any, batch: Any = None, **options: Any) -> tuple[Any, Any]:
    """The trace with every step traced, then with later steps copied where they can be."""
    workload = make_workload(model, batch, gpu="h200", **options)
    traces = []
    for repeat in (False, True):
        _tracer.REPEAT_STEPS = repeat
        try:
            traces.append(_tracer.trace_workload(workload, H200))
        finally:
            _tracer.REPEAT_STEPS = True
    return traces[0], traces[1]


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256)
    return GPT2LMHeadModel(config)


def _gpt2_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (2, 64))
    return {"input_ids": ids, "labels": ids, "attention_mask": torch.ones(2, 64, dtype=torch.long)}


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed", "fp16-mixed"])
def test_a_copied_step_is_the_traced_step(precision: str) -> None:
    every, copied = _both(_gpt2, _gpt2_batch, precision=precision, steps=3)
    assert every.copied_steps == 0
    assert copied.copied_steps == 2, copied.traced_again  # steps 2 and 3
    assert _normalized(copied) == _normalized(every)


def test_a_convolutional_step_with_batch_norm_is_copied_exactly() -> None:
    resnet18 = pytest.importorskip("torchvision.models").resnet18

    every, copied = _both(resnet18, lambda: torch.randn(4, 3, 64, 64), precision="bf16-mixed")
    assert copied.copied_steps == 1
    assert _normalized(copied) == _normalized(every)


def test_inference_steps_are_copied() -> None:
    every, copied = _both(_gpt2, _gpt2_batch, mode="infer", steps=2)
    assert copied.copied_steps == 1
    assert _normalized(copied) == _normalized(every)


class _Caching(nn.Module):
    """Keeps a tensor from each forward until the next replaces it (a cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(256, 256)
        self.kept: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.kept = y.detach() * 2
        return y.sum()


def test_a_step_that_keeps_memory_into_the_next_is_traced_again() -> None:
    every, copied = _both(_Caching, lambda: torch.randn(64, 256))
    assert copied.copied_steps == 0
    assert copied.traced_again == "step 1 keeps memory other than its gradients"
    assert _normalized(copied) == _normalized(every)


class _Gated(nn.Module):
    """Runs a larger branch when the batch's flag says so: its program hangs on values."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(64, 64)
        self.big = nn.Linear(64, 4096)

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        if bool(flag.any()):
            return self.big(x).sum()
        return self.small(x).sum()


def test_values_read_from_a_batch_that_changes_make_the_step_traced_again() -> None:
    flags = itertools.cycle([torch.zeros(4), torch.ones(4)])  # each batch flips the flag

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(8, 64), next(flags)

    every, copied = _both(_Gated, batch)
    assert copied.copied_steps == 0
    assert copied.traced_again == "the batch differs from step 1's where values were read"
    # step 2 ran the big branch, as traced: its output is 8 x 4096 floats
    sizes = [e.size for e in copied.events if e.kind == "alloc"]
    assert 8 * 4096 * 4 in sizes
    assert _normalized(copied) == _normalized(every)


def test_values_read_from_a_batch_that_stays_the_same_let_the_step_be_copied() -> None:
    every, copied = _both(_Gated, lambda: (torch.randn(8, 64), torch.ones(4)))
    assert copied.copied_steps == 1
    assert _normalized(copied) == _normalized(every)


def test_a_users_step_function_is_traced_at_every_step() -> None:
    def step(model: nn.Module, batch: torch.Tensor, optimizer: Any) -> None:
        model(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    _, copied = _both(lambda: nn.Linear(64, 64), lambda: torch.randn(8, 64), step_fn=step)
    assert copied.copied_steps == 0


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_micro_batches_after_the_second_are_copied_from_it(precision: str) -> None:
    every, copied = _both(_gpt2, _gpt2_batch, precision=precision, accumulation=4, steps=2)
    assert (every.copied_micro_batches, copied.copied_micro_batches) == (0, 2)
    assert copied.copied_steps == 1
    assert _normalized(copied) == _normalized(every)


def test_copied_micro_batches_count_the_ops_of_traced_ones() -> None:
    workload = make_workload(_gpt2, _gpt2_batch, gpu="h200", accumulation=3, steps=2)
    traces = []
    for repeat in (False, True):
        _tracer.REPEAT_STEPS = repeat
        try:
            traces.append(_tracer.trace_workload(workload, H200, costs=True))
        finally:
            _tracer.REPEAT_STEPS = True
    every, copied = traces
    assert copied.copied_micro_batches == 1
    assert every.costs is not None and copied.costs is not None
    assert copied.costs.phases == every.costs.phases


def test_a_micro_batch_whose_batch_values_differ_is_traced() -> None:
    flags = itertools.cycle([torch.zeros(4), torch.ones(4)])  # each micro-batch flips the flag

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(8, 64), next(flags)

    every, copied = _both(_Gated, batch, accumulation=4, steps=1)
    assert copied.copied_micro_batches == 0
    assert _normalized(copied) == _normalized(every)


class _Doubling(nn.Module):
    """Makes a large temporary when the batch's flag says so: the same parameters either way."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if bool(flag.any()):
            y = y + torch.ones(8, 64, 512, device=x.device).sum(-1)
        return y.sum()


def test_micro_batches_are_copied_from_the_second_alone() -> None:
    """The third is traced (its flag differs from the second's); the fourth and fifth are not
    copied from the second and third together."""
    zero, one = torch.zeros(4), torch.ones(4)
    flags = itertools.cycle([zero, zero, one, one, one])  # five batches a trace, both ways

    def batch() -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(8, 64), next(flags)

    every, copied = _both(_Doubling, batch, accumulation=5, steps=1)
    assert copied.copied_micro_batches == 0
    assert _normalized(copied) == _normalized(every)
