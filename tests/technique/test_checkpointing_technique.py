"""Activation checkpointing through the technique hooks: asked for by its own setting (first in
the registry's order, memfit's wrapping where offload must wrap it in turn), refused in
techniques=, and switched on and off in a live model with words that say how."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit import InvalidInputError
from memfit.technique import GpuPlace, active_techniques
from memfit.technique.checkpointing import TECHNIQUE, checkpointed_blocks
from memfit.workload import make_workload


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x).relu())


def _blocks() -> nn.Module:
    return nn.Sequential(*[Block() for _ in range(4)])


def _batch() -> torch.Tensor:
    return torch.randn(8, 16)


def test_checkpointing_is_given_by_its_setting_and_runs_first() -> None:
    w = make_workload(_blocks, _batch, activation_checkpointing=0.5, offload=1.0, gpu="h100")
    given = [(t.name, v) for t, v in active_techniques(w)]
    assert given == [("checkpointing", (0.5, True)), ("offload", (1.0, False))]
    full = make_workload(_blocks, _batch, activation_checkpointing=True, gpu="h100")
    assert next(iter(active_techniques(full)))[1] == (True, full.enable_checkpointing is None)
    plain = make_workload(_blocks, _batch, gpu="h100")
    assert [t.name for t, _ in active_techniques(plain)] == []


def test_techniques_checkpointing_is_refused_with_the_setting_to_give() -> None:
    with pytest.raises(InvalidInputError, match="give activation_checkpointing=True"):
        make_workload(_blocks, _batch, techniques={"checkpointing": True})


def test_a_live_model_is_wrapped_said_and_unwrapped() -> None:
    model = _blocks()
    value = (0.5, False)
    assert TECHNIQUE.refusal_live(value, model) is None
    assert TECHNIQUE.live_words(value, model) == (
        "full activation checkpointing of 2 of 4 blocks (memfit's)"
    )
    undo = TECHNIQUE.apply(value, model, None, GpuPlace())
    assert len(checkpointed_blocks(model)) == 2
    undo()
    assert checkpointed_blocks(model) == []


class Switched(nn.Sequential):
    is_gradient_checkpointing = True  # as a transformers model whose own switch is on


def test_blocks_checkpointed_twice_are_refused_by_name() -> None:
    model = Switched(*[Block() for _ in range(4)])
    refusal = TECHNIQUE.refusal_live(("selective", True), model)
    assert refusal is not None and "would be checkpointed twice" in refusal
    assert "Switched" in refusal


def test_a_model_without_repeated_blocks_is_refused() -> None:
    refusal = TECHNIQUE.refusal_live((True, False), nn.Linear(4, 4))
    assert refusal is not None and "Linear" in refusal
