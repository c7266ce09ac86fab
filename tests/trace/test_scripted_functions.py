"""A model that scripts a function with TorchScript while it is built (a module imported for
the first time inside the trace, as transformers' GPTBigCode is) estimates as one that does
not: its scripted softmax calls F.softmax, which memfit re-enters during a trace."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import memfit


class Scaled(nn.Module):
    def __init__(self, scripted: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 64)

        def softmax(x: torch.Tensor, scale: float) -> torch.Tensor:
            return F.softmax(x * scale, dim=-1)

        self.softmax = torch.jit.script(softmax) if scripted else softmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax(self.lin(x), 0.5)


def _peaks(scripted: bool) -> tuple[int, int]:
    est = memfit.estimate(
        lambda: Scaled(scripted), torch.randn(16, 64), loss_fn=lambda m, b: m(b).sum(), gpu="h100"
    )
    return est.peak_allocated, est.peak_reserved


def test_a_function_scripted_during_the_build_is_traced_as_the_plain_one() -> None:
    assert _peaks(scripted=True) == _peaks(scripted=False)


def test_scripting_after_a_trace_sees_the_plain_builtins() -> None:
    _peaks(scripted=True)

    def softmax(x: torch.Tensor) -> torch.Tensor:
        return F.softmax(x, dim=-1)

    scripted = torch.jit.script(softmax)
    assert torch.equal(scripted(torch.ones(2, 2)), torch.full((2, 2), 0.5))
    assert F.has_torch_function_unary is torch._C._has_torch_function_unary
