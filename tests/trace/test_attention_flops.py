"""Attention's FLOPs in the step costs: grouped-query attention, passed to the kernel with fewer
key/value heads than query heads (transformers 5.17's ``enable_gqa``), is counted as the kernel
computes it, every query head's scores, where PyTorch's formula refuses unequal heads."""

from __future__ import annotations

import pytest
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


def _recorded(op: object, args: tuple, kwargs: dict, out: tuple) -> tuple[str, int]:
    costs = StepCosts()
    costs.record(op, args, kwargs, out, "step2.forward")
    kind, flops, _ = costs.phases["step2.forward"].ops[0]
    return kind, flops


def test_scores_are_counted_in_whole_tiles() -> None:
    # ViT-B/16's 197 tokens: the kernel computes 256 x 256 scores (its tiles of 64 queries by
    # 128 keys forward, 64 by 64 backward), 1.69 times what the formula counts
    op = aten._scaled_dot_product_cudnn_attention.default
    q = _meta(2, 12, 197, 64)
    kind, flops = _recorded(op, (q, q, q, None, True), {}, (q,))
    assert kind == "attn:bf16"
    assert flops == 4 * 2 * 12 * 256 * 256 * 64
    aligned = _meta(2, 12, 512, 64)  # a multiple of the tiles: the formula's own
    assert _recorded(op, (aligned, aligned, aligned, None, True), {}, (aligned,))[1] == (
        4 * 2 * 12 * 512 * 512 * 64
    )


def test_dropout_inside_the_kernel_is_a_kind_of_its_own() -> None:
    op = aten._scaled_dot_product_cudnn_attention.default
    q = _meta(2, 12, 512, 64)
    assert _recorded(op, (q, q, q, None, True, 0.1), {}, (q,))[0] == "attn_dropout:bf16"
    assert _recorded(op, (q, q, q, None, True, 0.0), {}, (q,))[0] == "attn:bf16"


def test_a_calibration_without_dropout_curves_times_it_as_plain_attention() -> None:
    import dataclasses

    from memfit._gpus import resolve_gpu
    from memfit.planner import calibration_for

    shipped = calibration_for(resolve_gpu("h200"))[0]
    curves = {k: v for k, v in shipped.curves.items() if "dropout" not in k}
    old = dataclasses.replace(shipped, curves=curves)
    assert old.curve_key("attn_dropout:bf16") == "attn:bf16"
    assert old.curve_key("attn_dropout_bwd:bf16") == "attn_bwd:bf16"
    slow = {**curves, "attn_dropout:bf16": tuple((w, 3 * t) for w, t in curves["attn:bf16"])}
    new = dataclasses.replace(shipped, curves=slow)
    assert new.gpu_seconds("attn_dropout:bf16", 10**11, 0) == pytest.approx(
        3 * old.gpu_seconds("attn_dropout:bf16", 10**11, 0), rel=0.01
    )
