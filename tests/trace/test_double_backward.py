"""A gradient taken inside the step (a WGAN-GP critic's gradient penalty,
``autograd.grad(..., create_graph=True)``): its matrix products run on autograd's device
thread, whose cuBLAS workspace is made then, in the forward; and the double backward's
convolution by a transposed gradient copies that weight first, as cuDNN does."""

from __future__ import annotations

import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._conv_copies import conv_weight_copy
from memfit.trace._tracer import trace_workload
from memfit.workload import make_workload


class _Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.head = nn.Linear(16 * 8 * 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).flatten(1))


def _penalized(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    x = batch.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    return ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()


def _allocs() -> list[tuple[str, str, int]]:
    work = make_workload(_Critic, lambda: torch.randn(32, 3, 8, 8), loss_fn=_penalized, steps=1)
    trace = trace_workload(work, resolve_gpu("h100"))
    out = []
    for ev in trace.events:
        if ev.kind == "alloc" and ev.info is not None:
            info = trace.infos[ev.info]
            out.append((info.op, info.phase, ev.size))
    return out


def test_a_gradient_in_the_forward_makes_the_backward_threads_workspace_there() -> None:
    made = [(op, phase) for op, phase, _ in _allocs() if op.startswith("cublas workspace")]
    assert ("cublas workspace (backward thread)", "step1.forward") in made
    assert len(made) == 2  # one a thread, the backward's never made again


def test_the_double_backward_copies_a_transposed_weight_before_the_input() -> None:
    allocs = _allocs()
    copies = [i for i, (op, _, _) in enumerate(allocs) if op == "convolution weight copy"]
    assert copies
    # the weight gradient convolves the transposed input gradient by the transposed
    # grad_output: the latter's copy, then the input's
    assert all(allocs[i + 1][0] == "convolution input copy" for i in copies)


def test_a_weight_laid_out_as_the_convolution_runs_is_not_copied() -> None:
    x = torch.empty(8, 3, 16, 16, device="meta")
    w = torch.empty(16, 3, 3, 3, device="meta")
    assert conv_weight_copy((x, w)) == 0
    grad = torch.empty(8, 16, 16, 16, device="meta")
    assert conv_weight_copy((x.transpose(0, 1), grad.transpose(0, 1))) == grad.numel() * 4
