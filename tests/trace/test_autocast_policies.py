"""Emulated CUDA autocast as the C++ wrappers act: norms are given dtype=float32 and read their
half input as it is (fp32_set_opt_dtype, fp32_append_dtype); square is pow, in float32."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from memfit._gpus import resolve_gpu
from memfit.trace._autocast import AutocastState, autocast_policy, cast_args
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload


def test_norms_get_a_float32_dtype_and_no_cast():
    state = AutocastState(enabled=True, dtype=torch.bfloat16)
    x = torch.empty(8, 64, dtype=torch.bfloat16, device="meta")
    for fn in (torch.linalg.vector_norm, torch.linalg.matrix_norm, torch.norm, torch.Tensor.norm):
        policy = autocast_policy(fn)
        assert policy == "fp32_set_dtype"
        args, kwargs = cast_args(policy, (x,), {}, state)
        assert args[0] is x and kwargs == {"dtype": torch.float32}
    # a dtype given stays; a layer norm is still cast to float32
    assert cast_args("fp32_set_dtype", (x,), {"dtype": torch.float64}, state)[1] == {
        "dtype": torch.float64
    }
    assert autocast_policy(F.layer_norm) == "fp32"


class _CosineHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.proj(x)  # bf16 under autocast
        return (F.normalize(q, dim=-1) * q.norm(dim=-1, keepdim=True)).float().sum()


def test_normalize_under_bf16_autocast_copies_nothing_to_float32():
    # H100, torch 2.11: Swin V2's F.normalize of q and k, ConvNeXt V2's GRN norm: the norm's
    # output is float32, its bf16 input is not copied (the quotient is float32 by promotion)
    work = Workload(
        build_model=_CosineHead,
        make_batch=lambda: torch.randn(4096, 64),
        loss_fn=lambda m, b: m(b),
        optimizer="sgd",
        precision="bf16-mixed",
        mode="train",
    )
    trace = trace_workload(work, resolve_gpu("h100"))
    forward = [
        trace.infos[e.info]
        for e in trace.events
        if e.kind == "alloc" and e.info is not None and trace.infos[e.info].phase == "step1.forward"
    ]
    copies = [i for i in forward if i.op == "_to_copy" and i.dtype == "float32"]
    assert copies == []
    assert [i.op for i in forward if i.dtype == "float32" and i.shape == (4096, 1)][:2] == [
        "linalg_vector_norm",
        "clamp_min",
    ]


def test_square_runs_in_float32_as_the_pow_it_is():
    # H100, torch 2.11: transformers' Arcee squares its ReLU under bf16 autocast in float32
    assert autocast_policy(torch.square) == autocast_policy(torch.Tensor.square) == "fp32"
    state = AutocastState(enabled=True, dtype=torch.bfloat16)
    x = torch.empty(8, 64, dtype=torch.bfloat16, device="meta")
    (cast,), _ = cast_args("fp32", (x,), {}, state)
    assert cast.dtype == torch.float32


def test_a_weights_cast_cached_under_no_grad_still_carries_its_gradient():
    """Real autocast caches a weight's cast with autograd on, wherever it is first made: a
    model that runs a layer under ``no_grad`` before running it with grad (HRM's early
    cycles) reuses the cast and the weight still gets its gradient, so the matmul saves its
    input. A cast made without autograd would drop both."""
    state = AutocastState(enabled=True, dtype=torch.bfloat16)
    weight = torch.nn.Parameter(torch.empty(8, 8, device="meta"))
    x = torch.empty(4, 8, device="meta")
    with torch.no_grad():
        first = cast_args("lowp", (x, weight), {}, state)[0][1]
    again = cast_args("lowp", (x, weight), {}, state)[0][1]
    assert again is first  # one cast, cached
    assert again.requires_grad and again.grad_fn is not None
    assert F.linear(x, again).requires_grad
