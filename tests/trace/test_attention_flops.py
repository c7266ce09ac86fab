"""Attention's FLOPs in the step costs: grouped-query attention, passed to the kernel with fewer
key/value heads than query heads (transformers 5.17's ``enable_gqa``), is counted as the kernel
computes it, every query head's scores, where PyTorch's formula refuses unequal heads."""

from __future__ import annotations

import torch

from memfit.trace import StepCosts

aten = torch.ops.aten


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.bfloat16, device="meta")


def test_grouped_query_attention_counts_every_query_heads_scores() -> None:
    q, full, grouped = _meta(2, 32, 256, 64), _meta(2, 32, 256, 64), _meta(2, 4, 256, 64)
    op = aten._scaled_dot_product_flash_attention.default
    out = (_meta(2, 32, 256, 64),)
    costs = StepCosts()
    costs.record(op, (q, full, full), {}, out, "step2.forward")
    costs.record(op, (q, grouped, grouped), {}, out, "step2.forward")
    (kind_mha, flops_mha, _), (kind_gqa, flops_gqa, bytes_gqa) = costs.phases["step2.forward"].ops
    assert kind_mha == kind_gqa == "attn:bf16"
    assert flops_gqa == flops_mha == 4 * 2 * 32 * 256 * 256 * 64
    assert bytes_gqa < costs.phases["step2.forward"].ops[0][2]  # the traffic is the real heads'
