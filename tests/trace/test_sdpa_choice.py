"""Which attention kernel the emulated GPU picks, and what it saves for backward."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from memfit.trace._sdpa import choose_backend


def qkv(dtype, heads=8, seq=256, dim=64, requires_grad=True):
    t = torch.empty(2, heads, seq, dim, dtype=dtype, device="meta", requires_grad=requires_grad)
    return t, t, t


def test_half_precision_runs_cudnn_on_hopper_and_flash_on_ampere():
    # H200, torch 2.11, cuDNN 9.19 (benchmarks/results/*/sdpa_probe.json.gz): cuDNN comes first
    assert choose_backend(*qkv(torch.bfloat16), None, sm=90) == "cudnn"
    assert choose_backend(*qkv(torch.bfloat16), None, sm=80) == "flash"


def test_fp32_runs_memory_efficient():
    assert choose_backend(*qkv(torch.float32), None, sm=90) == "efficient"


def test_a_head_dim_with_a_stride_runs_math():
    # H100, torch 2.11: timm's LowFormer chunks q, k and v off a permuted tensor, its head dim
    # last but of stride 49: no fused kernel takes it, on any GPU
    packed = torch.empty(2, 2, 96, 49, dtype=torch.bfloat16, device="meta", requires_grad=True)
    q, k, v = packed.permute(0, 1, 3, 2).chunk(3, dim=3)
    assert q.stride(-1) == 49
    assert choose_backend(q, k, v, None, sm=90) == "math"
    assert choose_backend(q, k, v, None, sm=80) == "math"
    contiguous = [t.contiguous() for t in (q, k, v)]
    assert choose_backend(*contiguous, None, sm=90) == "cudnn"


def test_a_mask_rules_out_flash_not_cudnn():
    mask = torch.empty(2, 1, 256, 256, dtype=torch.bool, device="meta")
    assert choose_backend(*qkv(torch.bfloat16), mask, sm=90) == "cudnn"
    assert choose_backend(*qkv(torch.bfloat16), mask, sm=80) == "efficient"


def test_flash_needs_ampere():
    assert choose_backend(*qkv(torch.float16), None, sm=75) == "efficient"


def test_a_learned_bias_runs_memory_efficient_with_equal_heads_else_math():
    bias = torch.empty(1, 8, 256, 256, device="meta", dtype=torch.bfloat16, requires_grad=True)
    assert choose_backend(*qkv(torch.bfloat16), bias, sm=90) == "efficient"
    q = torch.empty(2, 8, 256, 64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    kv = torch.empty(2, 2, 256, 64, dtype=torch.bfloat16, device="meta", requires_grad=True)
    assert choose_backend(q, kv, kv, bias, sm=90, enable_gqa=True) == "math"


def test_a_bias_with_strided_rows_runs_math():
    # transformers 5.17's T5 position bias: (1, heads, q, k) with strides (8, 1, 4096, 8)
    bias = torch.empty_strided((1, 8, 512, 512), (8, 1, 4096, 8), device="meta")
    assert choose_backend(*qkv(torch.float32, seq=512), bias, sm=90) == "math"


def test_a_single_key_or_a_single_query_with_dropout_leaves_cudnn():
    q1 = torch.empty(2, 8, 1, 64, dtype=torch.bfloat16, device="meta")
    k = torch.empty(2, 8, 2048, 64, dtype=torch.bfloat16, device="meta")
    assert choose_backend(q1, k, k, None, sm=90) == "cudnn"  # decoding with a cache
    assert choose_backend(q1, k, k, None, sm=90, dropout_p=0.1) == "flash"
    assert choose_backend(q1, q1, q1, None, sm=90) == "flash"


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

    hopper = estimate(Attn, batch, precision="fp16", gpu="h200")
    ampere = estimate(Attn, batch, precision="fp16", gpu="a100-80g")
    old = estimate(Attn, batch, precision="fp16", gpu="v100")  # sm70: no flash, no cuDNN
    assert any("cudnn" in n for n in hopper.notes)
    assert any("flash" in n for n in ampere.notes)
    assert any("efficient" in n for n in old.notes)


def test_flash_backward_takes_one_buffer_for_its_accumulator_and_sums():
    # H200, torch 2.11: one allocation of the fp32 dq accumulator + the softmax sums + 256 bytes
    # (51,118,336 bytes for GPT-2 b16 s1024), freed when the kernel ends
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload._step import Workload

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
        if e.kind == "alloc" and "fused attention backward" in trace.infos[e.info].op
    ]
    assert sizes == [b * s * h * d * 4 + b * h * s * 4 + 256]


def test_grouped_query_cudnn_backward_adds_the_expanded_dk_dv_to_the_same_buffer():
    # TinyLlama b4 s2048 on an H200: one 135,266,560-byte buffer = 68,157,696 (dq accumulator,
    # softmax sums, 256) + 2 x 33,554,432 (dK and dV per query head)
    from memfit.trace._kernels import KernelModel

    q = torch.empty(4, 32, 2048, 64, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(4, 4, 2048, 64, dtype=torch.bfloat16, device="meta")
    func = torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default
    args = (q, q, kv, kv, q, q, None, None, None, None, None, 2048, 2048, 0.0, True, None)
    groups = KernelModel(90).scratch(func, args, {})
    assert [[size for size, _ in group] for group in groups] == [[135_266_560]]


def test_grouped_query_flash_backward_expands_dk_dv_after_its_accumulator():
    # mha_bwd (flash_api.cpp): the softmax sums, the dQ accumulator, then dK and dV at every
    # query head, each its own buffer
    from memfit.trace._kernels import KernelModel

    q = torch.empty(4, 32, 2048, 64, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(4, 4, 2048, 64, dtype=torch.bfloat16, device="meta")
    func = torch.ops.aten._scaled_dot_product_flash_attention_backward.default
    args = (q, q, kv, kv, q, q, None, None, 2048, 2048, 0.0, True, None, None)
    groups = KernelModel(80).scratch(func, args, {})
    assert [[size for size, _ in group] for group in groups] == [
        [4 * 32 * 2048 * 4, 4 * 2048 * 32 * 64 * 4, 33_554_432, 33_554_432]
    ]


def _attention_trace(mask=None, *, grad=True, dtype=torch.bfloat16, heads=(8, 8)):
    """The trace of one SDPA call for an H200, with a backward when ``grad``."""
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload._step import Workload

    b, s, d = 2, 1024, 64
    hq, hkv = heads

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(96, hq * d)  # 96: the input is not the output's size
            self.kv = torch.nn.Linear(96, 2 * hkv * d)

        def forward(self, x):
            q = self.q(x).view(b, s, hq, d).transpose(1, 2)
            k, v = self.kv(x).view(b, s, 2, hkv, d).permute(2, 0, 3, 1, 4)
            m = None if mask is None else mask.to(x.device)
            out = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=m, enable_gqa=hq != hkv
            )
            return out.transpose(1, 2).reshape(b, s, hq * d)

    work = Workload(
        lambda: Attn().to(dtype),
        lambda: torch.randn(b, s, 96, dtype=dtype),
        lambda m, x: m(x).float().sum(),
        optimizer="sgd",
        steps=1,
        mode="train" if grad else "infer",
    )
    return trace_workload(work, resolve_gpu("h200")), (b, hq, s, d)


def _sizes(trace, op):
    return [e.size for e in trace.events if e.kind == "alloc" and op in trace.infos[e.info].op]


def test_cudnn_without_gradients_makes_no_log_sum_exp():
    # H200 (sdpa_probe.json.gz, Llama-2-7B inference b8 s2048): the seed, the offset and the
    # output, which is laid out as the query is, so going back to (batch, seq) copies nothing
    trace, (b, h, s, d) = _attention_trace(grad=False)
    lse = b * h * s * 4
    sizes = [e.size for e in trace.events if e.kind == "alloc"]
    assert lse not in sizes
    assert _sizes(trace, "empty_like").count(b * h * s * d * 2) == 1  # (the other: the input)
    assert _sizes(trace, "clone") == []


def test_cudnn_with_gradients_saves_a_log_sum_exp():
    # H100 op sweep (torch 2.11): cuDNN's op allocates its CUDA seed and offset first, then the
    # output and the log-sum-exp
    trace, (b, h, s, d) = _attention_trace(grad=True)
    sizes = [
        e.size
        for e in trace.events
        if e.kind == "alloc" and trace.infos[e.info].op == "_scaled_dot_product_cudnn_attention"
    ]
    assert sizes[:4] == [8, 8, b * h * s * d * 2, b * h * s * 4]


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_cudnn_takes_a_256_byte_workspace_after_its_outputs(grad):
    # every cuDNN attention call in the H200 traces (torch 2.11): the seed and offset, the
    # output (and the log-sum-exp when training), then 256 bytes allocated and freed at once
    trace, _ = _attention_trace(grad=grad)
    events = trace.events
    at = [
        i
        for i, e in enumerate(events)
        if e.kind == "alloc" and e.size == 256 and trace.infos[e.info].phase == "step1.forward"
    ]
    assert len(at) == 1
    assert events[at[0] + 1].kind == "free" and events[at[0] + 1].block == events[at[0]].block
    assert events[at[0] - 1].kind == "alloc"  # right after the call's outputs


def test_a_boolean_mask_becomes_an_additive_one_for_the_call():
    # Mistral-7B inference on an H200: where(mask, 0, -inf) of the query's dtype, 64 MiB per
    # layer at b2 s4096, freed when the call returns
    mask = torch.ones(2, 1, 1024, 1024, dtype=torch.bool).tril()
    trace, _ = _attention_trace(mask, grad=False, heads=(8, 2))
    assert _sizes(trace, "where") == [2 * 1 * 1024 * 1024 * 2]
    assert _sizes(trace, "repeat") == []  # cuDNN takes fewer key/value heads as they are


def test_memory_efficient_backward_takes_delta_then_its_workspace():
    # BERT-base b32 s512 fp32 on an H200: grad_out x output (50,331,648) and two row sums
    # (786,432), the product and first sum freed, then a 50,380,800-byte workspace
    from memfit.trace._kernels import KernelModel

    q = torch.empty(32, 12, 512, 64, device="meta")
    func = torch.ops.aten._scaled_dot_product_efficient_attention_backward.default
    groups = KernelModel(90).scratch(func, (q, q, q, q, None, q), {})
    assert [[item[0] for item in group] for group in groups] == [
        [50_331_648, 786_432, 786_432],
        [50_380_800],
    ]
    assert [len(item) == 3 and item[2] for item in groups[0]] == [False, False, True]


def test_a_learned_bias_broadcast_over_the_batch_gets_a_full_size_gradient():
    # T5's position bias (1, heads, q, k) on an H200: the kernel writes a dense (batch, heads,
    # q, k) gradient (268,435,456 bytes at b32 s512), summed to the bias's shape after
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload._step import Workload

    b, h, s, d = 4, 2, 128, 64

    class Biased(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(d))
            self.bias = torch.nn.Parameter(torch.zeros(1, h, s, s))

        def forward(self, x):
            q = x.view(b, h, s, d) * self.w
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=self.bias)

    work = Workload(
        Biased, lambda: torch.randn(b, h * s * d), lambda m, x: m(x).sum(), "sgd", steps=1
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    grads = _sizes(trace, "_scaled_dot_product_efficient_attention_backward")
    assert b * h * s * s * 4 in grads
    assert h * s * s * 4 in _sizes(trace, "sum")  # the bias's own gradient


# --- every call torch was asked about on an H200 (torch 2.11, cuDNN 9.19) --------------------

_PROBED = (
    Path(__file__).resolve().parents[2]
    / "benchmarks/results/2026-11-30-h200-attention-finders-heldout/attention"
)
_TORCH_NAMES = {
    "CUDNN_ATTENTION": "cudnn",
    "FLASH_ATTENTION": "flash",
    "EFFICIENT_ATTENTION": "efficient",
    "MATH": "math",
}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _probe_call(row):
    dtype = _DTYPES[row["dtype"]]
    hq, hkv = row["heads"]
    b, s, d = row["batch"], row["seq"], row["head_dim"]
    kv = row.get("kv_seq", s)
    grad = row["requires_grad"]
    q = torch.empty(b, hq, s, d, dtype=dtype, device="meta", requires_grad=grad)
    k = torch.empty(b, hkv, kv, d, dtype=dtype, device="meta", requires_grad=grad)
    mask = None
    if row["mask"] == "bool":
        mask = torch.empty(b, 1, s, kv, dtype=torch.bool, device="meta")
    elif row["mask"].startswith("float"):
        mask = torch.empty(b, 1, s, kv, dtype=dtype, device="meta")
        mask.requires_grad_(row["mask"] == "float-grad")
    return q, k, k, mask, hq != hkv, row.get("dropout", 0.0)


def test_the_choice_matches_torch_on_the_whole_probed_grid():
    with gzip.open(_PROBED / "sdpa_probe.json.gz", "rt") as fh:
        data = json.load(fh)
    rows = data["choices"] + data["edges"]
    assert len(rows) == 2232
    wrong = []
    for row in rows:
        q, k, v, mask, gqa, dropout = _probe_call(row)
        got = choose_backend(q, k, v, mask, sm=90, enable_gqa=gqa, dropout_p=dropout)
        if got != _TORCH_NAMES[row["torch"]]:
            wrong.append((row, got))
    assert wrong == []


def _tensor(desc):
    if desc is None:
        return None
    t = torch.empty_strided(
        desc["shape"], desc["stride"], dtype=getattr(torch, desc["dtype"]), device="meta"
    )
    return t.requires_grad_(desc["requires_grad"])


def test_the_choice_matches_torch_on_every_call_of_the_validation_models():
    # each distinct SDPA call the validation set's models made on the H200 (transformers 5.17)
    data = json.loads((_PROBED / "sdpa_calls.json").read_text())
    calls = [c for w in data["workloads"].values() for c in w.get("calls", [])]
    assert len(calls) >= 20
    for c in calls:
        q, k, v, mask = (_tensor(c[n]) for n in ("q", "k", "v", "mask"))
        got = choose_backend(
            q, k, v, mask, sm=90, enable_gqa=c["enable_gqa"], dropout_p=c["dropout_p"]
        )
        assert got == _TORCH_NAMES[c["torch"]], c


def test_a_mask_lives_until_the_attention_backward_when_training():
    # BERT-base and TinyLlama with padded batches on an H200: SDPA keeps the (additive) mask
    # for cuDNN's backward; without this the estimates were 1.5% and 2.7% low
    mask = torch.ones(2, 1, 1024, 1024, dtype=torch.bool).tril()
    trace, _ = _attention_trace(mask, grad=True)
    infos = [trace.infos[e.info].op if e.info is not None else "" for e in trace.events]
    where = next(i for i, e in enumerate(trace.events) if e.kind == "alloc" and infos[i] == "where")
    block = trace.events[where].block
    freed = next(i for i, e in enumerate(trace.events) if e.kind == "free" and e.block == block)
    workspace = next(i for i, op in enumerate(infos) if "fused attention backward" in op)
    assert where < workspace < freed


def test_the_note_says_why_float32_grouped_query_attention_runs_the_math_kernel():
    # Qwen2.5-0.5B and TinyLlama-1.1B in float32 on an H200: the math kernel in every layer,
    # which keeps the whole scores; the memory-efficient kernel takes no grouped heads
    from memfit import estimate

    class Grouped(torch.nn.Module):
        def __init__(self, kv_heads):
            super().__init__()
            self.kv_heads = kv_heads
            self.q = torch.nn.Linear(64, 8 * 16)
            self.kv = torch.nn.Linear(64, 2 * kv_heads * 16)

        def forward(self, x):
            b, s, _ = x.shape
            q = self.q(x).view(b, s, 8, 16).transpose(1, 2)
            k, v = self.kv(x).view(b, s, 2, self.kv_heads, 16).permute(2, 0, 3, 1, 4)
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=self.kv_heads != 8
            )

    def batch():
        return torch.randn(2, 128, 64)

    grouped = estimate(lambda: Grouped(2), batch, gpu="h200")
    assert any("grouped-query attention in float32" in n for n in grouped.notes)
    plain = estimate(lambda: Grouped(8), batch, gpu="h200")
    assert any(n.startswith("attention ran") and n.endswith("x efficient") for n in plain.notes)
    half = estimate(lambda: Grouped(2), batch, precision="bf16-mixed", gpu="h200")
    assert not any("grouped-query" in n for n in half.notes)
