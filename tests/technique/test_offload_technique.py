"""Activation offload through the technique hooks: asked for by its own settings, refused in
techniques=, its copies observed in a trace through the place and not on a GPU, and a model
compiled as a whole refused by its hook."""

from __future__ import annotations

import pytest
from torch import nn

from memfit import InvalidInputError
from memfit.technique import GpuPlace, active_techniques
from memfit.workload import make_workload


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x: object) -> object:
        return self.down(self.up(x).relu())


def _blocks() -> nn.Module:
    return nn.Sequential(*[Block() for _ in range(4)])


def _batch() -> object:
    return __import__("torch").randn(8, 64)


def test_offload_is_given_by_its_own_settings() -> None:
    w = make_workload(_blocks, _batch, offload=0.5, gpu="h100")
    assert [(t.name, v) for t, v in active_techniques(w)] == [("offload", (0.5, False))]
    plain = make_workload(_blocks, _batch, gpu="h100")
    assert [t.name for t, _ in active_techniques(plain)] == []


def test_techniques_offload_is_refused_with_the_settings_to_give() -> None:
    with pytest.raises(InvalidInputError, match="give offload=SHARE"):
        make_workload(_blocks, _batch, techniques={"offload": 0.5})


def test_a_gpu_runs_the_copies_itself() -> None:
    assert GpuPlace().copies(lambda most: f"{most}") is None


def test_a_compiled_model_is_refused_by_the_offload_hook() -> None:
    from memfit.technique.offload import TECHNIQUE

    refusal = TECHNIQUE.refusal_compiled((1.0, False))
    assert (
        refusal is not None and "offload=1.0 cannot be estimated for a torch.compile'd" in refusal
    )


def test_the_trace_notes_what_the_copies_held_on_the_host() -> None:
    import memfit

    e = memfit.estimate(
        _blocks, lambda: __import__("torch").randn(4096, 64), offload=1.0, gpu="h100"
    )
    offloaded = [n for n in e.notes if n.startswith("activation offload:")]
    assert len(offloaded) == 1 and "pinned host memory" in offloaded[0]
