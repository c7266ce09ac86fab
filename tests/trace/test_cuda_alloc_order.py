"""Where CUDA kernels allocate in another order than the meta kernels the trace runs."""

from __future__ import annotations

import torch


def test_cuda_dropout_makes_its_mask_before_its_output():
    # torch's dropout_cuda allocates the bool mask, then the output (H200 traces: GPT-2-large
    # with checkpointing went from +2.21% to -0.04% reserved once the trace did the same)
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload._step import Workload

    work = Workload(
        lambda: torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.1)),
        lambda: torch.randn(512, 64),
        lambda m, x: m(x).sum(),
        optimizer="sgd",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    made = [
        (e.size, trace.infos[e.info].op)
        for e in trace.events
        if e.kind == "alloc" and trace.infos[e.info].op == "native_dropout"
    ]
    assert made[:2] == [(512 * 64, "native_dropout"), (512 * 64 * 4, "native_dropout")]


def _trace(build, batch, loss):
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload._step import Workload

    work = Workload(build, batch, loss, optimizer="sgd", steps=1)
    return trace_workload(work, resolve_gpu("h200"))


def _ops(trace):
    return [trace.infos[e.info].op for e in trace.events if e.kind == "alloc"]


def test_layer_norm_copies_a_permuted_input_first():
    # torchvision's ViT feeds ln_2 a (L, N, E)-ordered sum: CUDA's layer norm copies it to a
    # contiguous tensor before it allocates its output (H200 traces: ViT-B/16 fp32 -0.78% -> 0)
    norm = lambda: torch.nn.LayerNorm(64)  # noqa: E731
    permuted = _trace(norm, lambda: torch.randn(8, 4, 64).transpose(0, 1), lambda m, x: m(x).sum())
    plain = _trace(norm, lambda: torch.randn(4, 8, 64), lambda m, x: m(x).sum())
    ops = _ops(permuted)
    first = ops.index("layer norm contiguous input copy")
    assert ops[first + 1] == "native_layer_norm"  # the copy, then the output
    assert "layer norm contiguous input copy" not in _ops(plain)


def test_a_convolution_on_a_channels_last_input_stays_channels_last():
    # cuDNN keeps channels-last (cudnn_conv_suggest_memory_format); the meta kernel does not.
    # ConvNeXt's permuted LayerNorm input is then contiguous, as on the GPU: no copy
    from memfit.trace._layouts import cuda_layout

    aten = torch.ops.aten
    x = torch.empty(2, 8, 16, 16, device="meta").to(memory_format=torch.channels_last)
    w = torch.empty(8, 1, 7, 7, device="meta")
    args = (x, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 8)
    out = cuda_layout(aten.convolution.default, args, aten.convolution.default(*args))
    assert out.is_contiguous(memory_format=torch.channels_last) and out.shape == (2, 8, 16, 16)
    assert out.permute(0, 2, 3, 1).is_contiguous()
    nchw = torch.empty(2, 8, 16, 16, device="meta")
    args = (nchw, w, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 8)
    assert cuda_layout(
        aten.convolution.default, args, aten.convolution.default(*args)
    ).is_contiguous()


class _GroupedQueryAttention(torch.nn.Module):
    """Qwen2.5-0.5B's attention shapes: 14 query heads, 2 key/value heads of 64."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(896, 896)
        self.kv = torch.nn.Linear(896, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q(x).view(b, s, 14, 64).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, 2, 64).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True
        )


# What the H200 allocated and freed (bytes asked for) in one float32 grouped-query attention
# call of Qwen2.5-0.5B at 2 x 512, from the query's scaling to the causal mask's free: the
# allocator history of plan_proof.py's 12 GiB plan (torch 2.11, events 378-404;
# benchmarks/results/2026-12-03-h200-allocator-histories).
# The math kernel scales the query, makes the mask (ones, tril, two scalars, where), expands
# the key and value, runs the scores, softmax (with its boolean, per-row and scalar scratch),
# and frees its locals when it returns.
_H200_MATH_ATTENTION = [
    ("alloc", 3670016), ("alloc", 262144), ("alloc", 262144), ("free", 262144),
    ("alloc", 4), ("alloc", 4), ("alloc", 1048576), ("free", 4), ("free", 4),
    ("free", 262144), ("alloc", 3670016), ("alloc", 3670016), ("alloc", 3670016),
    ("alloc", 3670016), ("alloc", 29360128), ("alloc", 29360128), ("alloc", 7340032),
    ("alloc", 14336), ("alloc", 4), ("free", 4), ("free", 14336), ("free", 7340032),
    ("free", 29360128), ("alloc", 3670016), ("free", 3670016), ("free", 3670016),
    ("free", 1048576),
]  # fmt: skip


def test_the_math_attention_kernel_allocates_in_the_order_the_gpu_did():
    # in another order (the key and value expanded first, the mask made after the scores, no
    # softmax scratch) the float32 Qwen2.5-0.5B plan's 20 MiB segments were packed otherwise:
    # 20 MiB less reserved than the GPU over 11.8 GB
    batch = lambda: torch.randn(2, 512, 896)  # noqa: E731
    trace = _trace(_GroupedQueryAttention, batch, lambda m, x: m(x).sum())
    sizes: dict[int, int] = {}
    seq = []
    for e in trace.events:
        if e.kind == "alloc":
            sizes[e.block] = e.size
        seq.append((e.kind, e.size if e.kind == "alloc" else sizes[e.block]))
    n = len(_H200_MATH_ATTENTION)
    assert any(seq[i : i + n] == _H200_MATH_ATTENTION for i in range(len(seq) - n))


def test_softmax_backward_takes_a_temporary_after_its_gradient():
    # every float32 math-attention trace on the H200 (torch 2.11): the input gradient, then a
    # tensor of its size allocated and freed at once (SoftMax.cu's grad * output); without it
    # Qwen2.5-0.5B fully checkpointed was 16 MiB low in reserved over 12.2 GB
    trace = _trace(
        lambda: torch.nn.Linear(64, 64),
        lambda: torch.randn(32, 64),
        lambda m, x: (m(x).softmax(-1) * x).sum(),
    )
    events = trace.events
    at = next(
        i
        for i, e in enumerate(events)
        if e.kind == "alloc" and trace.infos[e.info].op == "_softmax_backward_data"
    )
    grad, temp, freed = events[at], events[at + 1], events[at + 2]
    assert temp.kind == "alloc" and temp.size == grad.size == 32 * 64 * 4
    assert freed.kind == "free" and freed.block == temp.block


class _TokenTypes(torch.nn.Module):
    """BERT's token type ids: a buffer of one row expanded over the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(2, 64)
        self.register_buffer("ids", torch.zeros(1, 512, dtype=torch.long), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.emb(self.ids.expand(x.shape[0], -1)) + x


def test_an_embedding_of_expanded_indices_copies_them_before_its_output():
    # at::embedding flattens its indices with reshape, a copy where they are expanded: H200
    # traces of BERT-large inference (torch 2.11), 262,144 bytes at 64 x 512, then the output
    trace = _trace(_TokenTypes, lambda: torch.randn(8, 512, 64), lambda m, x: m(x).sum())
    events = [e for e in trace.events if e.info is None or trace.infos[e.info].phase != "setup"]
    at = next(i for i, e in enumerate(events) if e.kind == "alloc" and e.size == 8 * 512 * 8)
    copy, out = events[at], events[at + 1]
    assert trace.infos[copy.info].op == "embedding indices flattened"
    assert out.kind == "alloc" and out.size == 8 * 512 * 64 * 4
    assert any(e.kind == "free" and e.block == copy.block for e in events[at + 2 :])
