"""Which attention kernel the emulated GPU picks, and what it saves for backward."""

from __future__ import annotations

import torch

from memfit.trace._sdpa import choose_backend


def qkv(dtype, heads=8, seq=256, dim=64, requires_grad=True):
    t = torch.empty(2, heads, seq, dim, dtype=dtype, device="meta", requires_grad=requires_grad)
    return t, t, t


def test_half_precision_without_mask_runs_flash_on_hopper():
    assert choose_backend(*qkv(torch.bfloat16), None, sm=90) == "flash"


def test_fp32_runs_memory_efficient():
    assert choose_backend(*qkv(torch.float32), None, sm=90) == "efficient"


def test_a_mask_rules_out_flash():
    mask = torch.empty(2, 1, 256, 256, dtype=torch.bool, device="meta")
    assert choose_backend(*qkv(torch.bfloat16), mask, sm=90) == "efficient"


def test_flash_needs_ampere():
    assert choose_backend(*qkv(torch.float16), None, sm=75) == "efficient"


def test_odd_head_dim_falls_back_to_math():
    assert choose_backend(*qkv(torch.float32, dim=30), None, sm=90) == "math"


def test_math_backend_saves_the_attention_matrix_flash_does_not():
    from memfit import estimate

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(64, 64 * 3)

        def forward(self, x):
            q, k, v = self.proj(x).view(x.shape[0], x.shape[1], 3, 4, 16).permute(2, 0, 3, 1, 4)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def batch():
        return torch.randn(4, 2048, 64, dtype=torch.float16)

    flash = estimate(Attn, batch, precision="fp16", gpu="h200")
    old = estimate(Attn, batch, precision="fp16", gpu="v100")  # sm70: no flash
    assert any("flash" in n for n in flash.notes)
    assert not any("flash" in n for n in old.notes)


def test_flash_backward_takes_one_buffer_for_its_accumulator_and_sums():
    # H200, torch 2.11: one allocation of the fp32 dq accumulator + the softmax sums + 256 bytes
    # (51,118,336 bytes for GPT-2 b16 s1024), freed when the kernel ends
    from memfit._gpus import resolve_gpu
    from memfit._workload import Workload
    from memfit.trace import trace_workload

    b, h, s, d = 2, 4, 256, 64

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(h * d, 3 * h * d)

        def forward(self, x):
            q, k, v = self.proj(x).view(b, s, 3, h, d).permute(2, 0, 3, 1, 4)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    work = Workload(
        lambda: Attn().half(),
        lambda: torch.randn(b, s, h * d, dtype=torch.float16),
        lambda m, x: m(x).float().sum(),
        optimizer="sgd",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    sizes = [
        e.size
        for e in trace.events
        if e.kind == "alloc" and "flash attention backward" in trace.infos[e.info].op
    ]
    assert sizes == [b * s * h * d * 4 + b * h * s * 4 + 256]


def test_grouped_query_flash_backward_adds_the_expanded_dk_dv_to_the_same_buffer():
    # TinyLlama b4 s2048 on an H200: one 135,266,560-byte buffer = 68,157,696 (dq accumulator,
    # softmax sums, 256) + 2 x 33,554,432 (dK and dV per query head)
    from memfit.trace._kernels import KernelModel

    q = torch.empty(4, 32, 2048, 64, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(4, 4, 2048, 64, dtype=torch.bfloat16, device="meta")
    func = torch.ops.aten._scaled_dot_product_flash_attention_backward.default
    args = (q, q, kv, kv, q, q, None, None, 2048, 2048, 0.0, True, None, None)
    groups = KernelModel(90).scratch(func, args, {})
    assert [[size for size, _ in group] for group in groups] == [[135_266_560]]
