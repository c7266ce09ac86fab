"""torch.compile's activation memory budget through the technique hooks: asked for by its own
setting, refused in techniques= and where it would be ignored, and set for a user's live compiled
model (the process's setting, put back by the undo)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memfit import InvalidInputError
from memfit.technique import GpuPlace, active_techniques
from memfit.technique.compilation import TECHNIQUE, budget_in_effect
from memfit.workload import make_workload


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))


def _batch() -> torch.Tensor:
    return torch.randn(4, 8)


def test_the_budget_is_given_by_its_setting() -> None:
    w = make_workload(lambda: torch.compile(_model()), _batch, activation_memory_budget=0.5)
    assert [(t.name, v) for t, v in active_techniques(w)] == [("memory_budget", 0.5)]


def test_techniques_memory_budget_is_refused_with_the_setting_to_give() -> None:
    with pytest.raises(InvalidInputError, match="give activation_memory_budget=SHARE"):
        make_workload(_model, _batch, techniques={"memory_budget": 0.5})


def test_a_budget_in_inference_is_refused_as_ignored() -> None:
    with pytest.raises(InvalidInputError, match="would be ignored here: inference saves"):
        make_workload(_model, _batch, mode="infer", activation_memory_budget=0.5)


def test_a_live_model_not_compiled_is_refused_and_a_compiled_one_set_and_put_back() -> None:
    plain = _model()
    refusal = TECHNIQUE.refusal_live(0.5, plain)
    assert refusal is not None and "not compiled as a whole" in refusal
    compiled = torch.compile(plain)
    assert TECHNIQUE.refusal_live(0.5, compiled) is None
    before = budget_in_effect()
    undo = TECHNIQUE.apply(0.25, compiled, None, GpuPlace())
    assert budget_in_effect() == 0.25
    undo()
    assert budget_in_effect() == before
    assert "0.25" in TECHNIQUE.live_words(0.25, compiled)
