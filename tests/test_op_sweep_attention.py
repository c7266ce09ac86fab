"""Attention and reductions traced as the op sweep traces them (``benchmarks/op_sweep_sides``),
against the allocations and frees an H100 made for the same calls (torch 2.11,
benchmarks/results/2026-12-06-h100-op-sweep): ``+`` an allocation's bytes, ``-`` its free."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.op_sweep_support import Op as _Op
from tests.op_sweep_support import SampleInput, tokens, trace_case


def _signed(events) -> list[int]:
    return [size if sign == "+" else -size for sign, size in tokens(events)]


def _qkv(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.randn(4, 4, 3, 8, dtype=dtype, requires_grad=True)
    k = torch.randn(4, 4, 6, 8, dtype=dtype, requires_grad=True)
    v = torch.randn(4, 4, 6, 8, dtype=dtype, requires_grad=True)
    return q, k, v


def test_memory_efficient_attention_pads_an_unaligned_mask_and_sizes_its_workspace():
    # float32 runs the memory-efficient kernel: a (3, 6) mask padded to (3, 8) first; in
    # backward the bias gradient's rows padded to 16, delta from grad_out x out (its sum freed
    # before the product), the 64 x 64 kernel's dQ tiles (16 x 16,400 bytes), the mask's
    # padding undone for its gradient
    q, k, v = _qkv(torch.float32)
    mask = torch.randn(3, 6, requires_grad=True)
    sample = SampleInput(q, args=(k, v), kwargs={"attn_mask": mask})
    op = _Op(F.scaled_dot_product_attention)
    assert _signed(trace_case(op, sample, "forward")["events"]) == [96, 1536, -96, -1536]
    assert _signed(trace_case(op, sample, "backward")["events"]) == [
        96, 1536, 2048, 1536, 1536, 3072, 3072, 3072, 1536, 192, 192, -192, -1536, 262400,
        -192, -262400, -96, -2048, 72, -3072, 96, -72, 72, -96, -1536, -1536, -72, -3072,
        -3072, -1536,
    ]  # fmt: skip


def test_cudnn_attention_allocates_its_seeds_first_and_an_unpadded_workspace():
    # bf16 runs cuDNN on an H100: the CUDA seed and offset, the output, the log-sum-exp, the
    # 256-byte workspace; in backward one workspace of 4 x 3 x 4 x 8 x 4 + 4 x 4 x 3 x 4 + 256
    # bytes (head dim 8 not padded to 32)
    q, k, v = _qkv(torch.bfloat16)
    sample = SampleInput(q, args=(k, v), kwargs={"is_causal": True})
    got = trace_case(_Op(F.scaled_dot_product_attention), sample, "backward")
    assert _signed(got["events"]) == [
        8, 8, 768, 192, 256, -256, 768, 768, 1536, 1536, 1984, -1984, -192, -8, -8, -768,
        -768, -1536, -1536, -768,
    ]  # fmt: skip


def test_memory_efficient_backward_of_packed_sequences():
    # fp16, 32 sequences of 2 tokens packed in one batch row (cu_seqlens): the kernel computes
    # delta itself (one float32 per token and head), and its workspace has a dQ tile per
    # sequence and head: 32 x 8 x 16,400 bytes; the seed and offset stay on the CPU
    q, k, v = (torch.randn(1, 64, 8, 8, dtype=torch.float16, requires_grad=True) for _ in "qkv")
    cu = torch.arange(0, 65, 2, dtype=torch.int32)
    kwargs = {
        "bias": None,
        "cu_seqlens_q": cu,
        "cu_seqlens_k": cu,
        "max_seqlen_q": 2,
        "max_seqlen_k": 2,
        "dropout_p": 0.0,
        "custom_mask_type": 0,
        "compute_log_sumexp": True,
    }
    sample = SampleInput(q, args=(k, v), kwargs=kwargs)
    op = _Op(torch.ops.aten._efficient_attention_forward)
    got = trace_case(op, sample, "backward")
    assert _signed(got["events"]) == [
        8192, 32768, 8192, 8192, 8192, 8192, 2048, 4198400, -2048, -4198400, -32768, -8192,
        -8192, -8192, -8192, -8192,
    ]  # fmt: skip


def test_a_reduction_frees_its_semaphores_before_its_partial_results():
    # l1_loss of 80^3 floats: |x - y|, then mean's partial results and semaphores, freed last
    # made first as the kernel's locals are
    x, y = torch.randn(80, 80, 80), torch.randn(80, 80, 80)
    got = trace_case(_Op(F.l1_loss), SampleInput(x, args=(y,)), "forward")
    assert _signed(got["events"]) == [
        2048000, 2048000, 4, 252, 4, -4, -252, -2048000, -2048000, -4,
    ]  # fmt: skip


def test_flash_attention_backward_copies_its_strided_inputs_and_pads_its_accumulator():
    # fp16 flash attention on a query transposed from (batch, heads, seq, dim): the output
    # laid out as the query, so the gradient (ones_like) and the output are copied dense
    # before the gradients; then softmax sums over 128 padded queries (8,192 bytes) and a dQ
    # accumulator with the head dim padded to 32 (262,144)
    q = torch.randn(4, 4, 11, 8, dtype=torch.float16).transpose(1, 2).requires_grad_()
    k, v = (torch.randn(4, 32, 4, 8, dtype=torch.float16, requires_grad=True) for _ in "kv")
    kwargs = {
        "cum_seq_q": None,
        "cum_seq_k": None,
        "max_q": 11,
        "max_k": 32,
        "dropout_p": 0.0,
        "is_causal": True,
        "return_debug_mask": False,
    }
    op = _Op(torch.ops.aten._flash_attention_forward)
    got = trace_case(op, SampleInput(q, args=(k, v), kwargs=kwargs), "backward")
    assert _signed(got["events"]) == [
        2816, 704, 16, 8, 2816, 2816, 2816, 2816, 8192, 8192, 8192, 262144, -262144, -8192,
        -2816, -2816, -8, -16, -704, -2816, -2816, -8192, -8192, -2816,
    ]  # fmt: skip
