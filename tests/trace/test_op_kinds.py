"""The kinds the step costs give ops, which pick the step-time model's rates: half-
precision products with unaligned rows, memory-bound ops by family and dtype; and the FLOPs of
causal attention and of grouped convolutions' backward, where PyTorch's formulas count work the
kernels do not do."""

from __future__ import annotations

import pytest
import torch

from memfit.trace import StepCosts

aten = torch.ops.aten


def _meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _kind(func: object, args: tuple[object, ...], out: object) -> tuple[str, int, int]:
    costs = StepCosts()
    costs.record(func, args, {}, out, "step2.forward")
    return costs.phases["step2.forward"].ops[0]


@pytest.mark.parametrize(
    ("vocabulary", "kind"),
    [(50304, "mm:bf16"), (50260, "mm_a4:bf16"), (30522, "mm_a2:bf16"), (50257, "mm_a1:bf16")],
)
def test_a_language_models_head_is_timed_by_its_rows_alignment(vocabulary: int, kind: str) -> None:
    hidden, weight = _meta(4096, 768), _meta(768, vocabulary)
    assert _kind(aten.mm.default, (hidden, weight), _meta(4096, vocabulary))[0] == kind


def test_a_transposed_unaligned_operand_is_unaligned_too() -> None:
    grad = _meta(4096, 50257)  # the head's backward: its gradient's rows are the vocabulary
    weight = _meta(50257, 768)
    assert _kind(aten.mm.default, (grad, weight), _meta(4096, 768))[0] == "mm_a1:bf16"
    logits_t = _meta(4096, 50257).t()  # the weight's gradient reads it transposed
    assert _kind(aten.mm.default, (logits_t, _meta(4096, 768)), _meta(50257, 768))[0] == (
        "mm_a1:bf16"
    )


def test_float32_products_keep_one_kind_whatever_their_alignment() -> None:
    a, b = _meta(64, 768, dtype=torch.float32), _meta(768, 50257, dtype=torch.float32)
    assert _kind(aten.mm.default, (a, b), _meta(64, 50257, dtype=torch.float32))[0] == "mm:fp32"


def test_memory_bound_ops_are_kept_by_family_and_dtype() -> None:
    x = _meta(8, 512, 768, dtype=torch.float32)
    w, b = _meta(768, dtype=torch.float32), _meta(768, dtype=torch.float32)
    norm = aten.native_layer_norm.default
    out = (x, _meta(8, 512, 1, dtype=torch.float32), _meta(8, 512, 1, dtype=torch.float32))
    assert _kind(norm, (x, [768], w, b, 1e-5), out)[0] == "mem:norm:fp32"
    y = _meta(8, 512, 768)
    assert _kind(aten.mul.Tensor, (y, y), y)[0] == "mem"  # elementwise: the plain kind
    assert _kind(aten._to_copy.default, (y,), x)[0] == "mem:copy:bf16"


def test_causal_attention_counts_half_the_formulas_flops() -> None:
    q = _meta(2, 12, 1024, 64)
    op = aten._scaled_dot_product_flash_attention.default
    out = (_meta(2, 12, 1024, 64),)
    full = _kind(op, (q, q, q, 0.0, False), out)[1]
    causal = _kind(op, (q, q, q, 0.0, True), out)[1]
    assert full == 4 * 2 * 12 * 1024 * 1024 * 64
    assert causal == full // 2


@pytest.mark.parametrize("groups", [1, 4, 96])
def test_a_grouped_convolutions_backward_counts_its_forward_once_per_gradient(
    groups: int,
) -> None:
    x, grad = _meta(16, 96, 28, 28), _meta(16, 96, 28, 28)
    weight = _meta(96, 96 // groups, 7, 7)
    op = aten.convolution_backward.default
    args = (
        grad,
        x,
        weight,
        None,
        [1, 1],
        [3, 3],
        [1, 1],
        False,
        [0, 0],
        groups,
        [True, True, False],
    )
    out = (_meta(16, 96, 28, 28), _meta(96, 96 // groups, 7, 7), None)
    forward = 2 * 16 * weight.numel() * 28 * 28
    assert _kind(op, args, out)[1] == 2 * forward  # PyTorch's formula: 96x for depthwise


@pytest.mark.parametrize(
    ("op", "shapes"),
    [
        (aten.mm.default, [(7, 5), (5, 3)]),
        (aten.addmm.default, [(3,), (7, 5), (5, 3)]),
        (aten.bmm.default, [(2, 7, 5), (2, 5, 3)]),
        (aten.baddbmm.default, [(2, 7, 3), (2, 7, 5), (2, 5, 3)]),
    ],
)
def test_matrix_products_are_counted_as_pytorchs_formulas_count_them(
    op: object, shapes: list[tuple[int, ...]]
) -> None:
    from torch.utils.flop_counter import flop_registry

    args = tuple(_meta(*s, dtype=torch.float32) for s in shapes)
    out = op(*args)  # type: ignore[operator]
    formula = flop_registry[op.overloadpacket]  # type: ignore[attr-defined]
    assert _kind(op, args, out)[1] == formula(*args, out_val=out)


def _cat_kind(tensors: list[torch.Tensor], dim: int = 0) -> str:
    out = torch.cat([t.to("meta") for t in tensors], dim)
    return _kind(aten.cat.default, ([t.to("meta") for t in tensors], dim), out)[0]


def test_a_concatenation_is_kept_by_the_kernel_cuda_picks_for_it() -> None:
    x = torch.empty(4, 12, 16, 64, dtype=torch.bfloat16)
    assert _cat_kind([x, x]) == "mem:cat:bf16"  # contiguous: the batched copy at the bandwidth
    # q, k and v's gradients laid out as their projection wrote them (timm's unbind backward)
    grads = torch.empty(4, 16, 3, 12, 64, dtype=torch.bfloat16).permute(2, 0, 3, 1, 4).unbind(0)
    assert _cat_kind(list(grads)) == "mem:cat_strided:bf16"
    # a cache's first keys: an empty 1-d input, skipped but counted, beside strided keys
    empty = torch.empty(0, dtype=torch.float32)
    keys = torch.empty(4, 16, 12, 64).transpose(1, 2)
    assert _cat_kind([empty, keys], -2) == "mem:cat_strided:fp32"
    assert _cat_kind([keys]) == "mem:copy:fp32"  # one input: copied
    # inputs of two dtypes (ViT's class token beside its patches) and results of 5 dimensions
    # are copied input by input
    cls = torch.empty(4, 1, 768)
    assert _cat_kind([cls, torch.empty(4, 196, 768, dtype=torch.bfloat16)], 1) == "mem:copy:fp32"
    five = torch.empty(2, 3, 4, 5, 6).transpose(1, 2)
    assert _cat_kind([five, five]) == "mem:copy:fp32"
    # channels-last inputs all alike are contiguous in their layout; mixed layouts are strided
    cl = torch.empty(8, 16, 7, 7).to(memory_format=torch.channels_last)
    assert _cat_kind([cl, cl], 1) == "mem:cat:fp32"
    assert _cat_kind([cl, torch.empty(8, 16, 7, 7)], 1) == "mem:cat_strided:fp32"


def test_vits_attention_backward_stacks_strided_gradients() -> None:
    pytest.importorskip("timm")
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload import make_workload

    w = make_workload("timm:vit_tiny_patch16_224", batch_size=2, precision="bf16-mixed", steps=1)
    costs = trace_workload(w, resolve_gpu("h200"), costs=True).costs
    assert costs is not None
    kinds = [op[0] for op in costs.phases["step1.backward"].ops if op[0].startswith("mem:cat")]
    blocks = 12
    assert kinds == ["mem:cat_strided:bf16"] * blocks


def test_a_products_result_folded_back_to_its_batch_launches_no_kernel() -> None:
    # a bias-free Linear on (batch, tokens, features): mm, then _unsafe_view of its result
    flat = _meta(4096, 2048)
    assert _kind(aten._unsafe_view.default, (flat, [8, 512, 2048]), _meta(8, 512, 2048)) == (
        "view",
        0,
        0,
    )


def test_an_elementwise_op_is_kept_by_the_kernel_tensoriterator_picks() -> None:
    x = _meta(8, 512, 768)
    # operands alike and dense, in one dtype: vectorized, the plain kind
    assert _kind(aten.mul.Tensor, (x, x), _meta(8, 512, 768))[0] == "mem"
    t = _meta(8, 768, 512).transpose(1, 2)  # alike in another order: still vectorized
    assert _kind(aten.add.Tensor, (t, t), _meta(8, 768, 512).transpose(1, 2))[0] == "mem"
    # a bias broadcast along the tokens, a 0-d GPU scale, a transposed operand: strided
    bias = _meta(768)
    assert _kind(aten.add.Tensor, (x, bias), _meta(8, 512, 768))[0] == "mem:ew_strided:bf16"
    scale = _meta(dtype=torch.float32)
    assert _kind(aten.mul.Tensor, (x, scale), _meta(8, 512, 768))[0] == "mem:ew_strided:bf16"
    assert _kind(aten.add.Tensor, (x, t), _meta(8, 512, 768))[0] == "mem:ew_strided:bf16"
    # a CPU scalar is passed by value: still vectorized
    assert _kind(aten.mul.Tensor, (x, torch.tensor(0.5)), _meta(8, 512, 768))[0] == "mem"
    # mixed precision's bfloat16 times float32, cast in the kernel: unrolled
    wide = _meta(8, 512, 768, dtype=torch.float32)
    assert _kind(aten.mul.Tensor, (x, wide), wide)[0] == "mem:ew_unrolled:bf16"
    # a boolean mask is taken as is
    mask = _meta(8, 512, 768, dtype=torch.bool)
    assert _kind(aten.where.self, (mask, x, x), _meta(8, 512, 768))[0] == "mem"


def test_llamas_rotary_and_norms_run_strided_and_cast_kernels() -> None:
    transformers = pytest.importorskip("transformers")
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload import make_workload

    config = transformers.LlamaConfig(
        vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 100, (2, 16))
    w = make_workload(model, {"input_ids": ids, "labels": ids}, precision="bf16-mixed", steps=1)
    costs = trace_workload(w, resolve_gpu("h200"), costs=True).costs
    assert costs is not None
    kinds = [op[0] for op in costs.phases["step1.forward"].ops]
    # rotary: heads laid out transposed times a cos/sin table broadcast over them; RMSNorm:
    # float32 states times the weight in bfloat16 under autocast's cast-back
    assert "mem:ew_strided:bf16" in kinds
    assert any(k.startswith("mem:ew_unrolled") for k in kinds)
    assert "mem" in kinds  # and plain vectorized ones (SiLU's product, residual adds)


def test_a_familys_backward_ops_are_a_family_of_their_own() -> None:
    from memfit.trace import mem_family

    assert mem_family("native_layer_norm") == "norm"
    assert mem_family("native_layer_norm_backward") == "norm_bwd"
    assert mem_family("_softmax_backward_data") == "softmax_bwd"
    assert mem_family("embedding_dense_backward") == "index_bwd"
    assert mem_family("mul") is None
    x, mean = _meta(8, 512, 768, dtype=torch.float32), _meta(8, 512, 1, dtype=torch.float32)
    w = _meta(768, dtype=torch.float32)
    backward = aten.native_layer_norm_backward.default
    args = (x, x, [768], mean, mean, w, w, [True, True, True])
    assert _kind(backward, args, (x, w, w))[0] == "mem:norm_bwd:fp32"
