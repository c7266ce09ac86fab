"""nn.LSTM under CUDA autocast runs autocast's own cuDNN wrapper (``_cudnn_rnn_cast_reflatten``):
fp16 whatever autocast's dtype, on a fresh fp16 copy of the weights, with the weights' gradients
cast back to fp32 one by one. The numbers the H200 allocated for lstm-lm-bf16mixed-b32-s512 (2
layers, hidden 1024, batch 32 x 512, torch 2.11;
benchmarks/results/2026-12-01-h200-heldout-families/heldout) are cited beside each check, which
runs the same sizes scaled down."""

from __future__ import annotations

import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._rnn_sizes import LstmCall, reserve_bytes, workspace_bytes
from memfit.trace._tracer import Trace, trace_workload
from memfit.workload._step import Workload

B, S, H, LAYERS = 4, 16, 64, 2
PARAMS = LAYERS * (2 * 4 * H * H + 2 * 4 * H)  # w_ih, w_hh, b_ih, b_hh per layer (input H)


def _trace(precision: str = "bf16-mixed") -> Trace:
    work = Workload(
        build_model=lambda: nn.LSTM(H, H, num_layers=LAYERS, batch_first=True),
        make_batch=lambda: torch.randn(B, S, H),
        loss_fn=lambda m, b: m(b)[0].float().sum(),
        optimizer="sgd",
        precision=precision,
        steps=1,
    )
    return trace_workload(work, resolve_gpu("h200"))


def _allocs(trace: Trace) -> list[tuple[str, int, str]]:
    out = []
    for e in trace.events[trace.steps_start :]:
        if e.kind == "alloc" and e.info is not None:
            info = trace.infos[e.info]
            out.append((info.op, e.size, info.dtype))
    return out


def test_autocast_runs_cudnn_in_fp16_on_a_fresh_fp16_weight_buffer() -> None:
    trace = _trace()
    allocs = _allocs(trace)
    ops = [op for op, _, _ in allocs]
    # H200: +33,587,200 (16,793,600 weights in fp16) first, then cx and hx cast to fp16
    # (131,072 each), then the input (33,554,432), its seq-first copy, the fp16 output
    first = ops.index("cuDNN LSTM fp16 weight buffer (autocast)")
    assert allocs[first][1] == PARAMS * 2
    state = LAYERS * B * H * 2
    assert [(s, d) for _, s, d in allocs[first + 1 : first + 4]] == [
        (state, "float16"),
        (state, "float16"),
        (B * S * H * 2, "float16"),
    ]
    # the reserve space is fp16's: (6 * 2 - 1) * 32 * 512 * 1024 * 2 + 256 = 369,099,008
    reserve = ops.index("cuDNN LSTM reserve space")
    assert allocs[reserve][1] == reserve_bytes(LAYERS, 1, B, S, H, 2)
    assert not any("cell kernels" in n for n in trace.notes)
    # fp16's workspace is its own probed fit, which needs no note
    workspace = allocs[ops.index("cuDNN LSTM workspace")][1]
    assert workspace == workspace_bytes(LstmCall("fp16", 2, LAYERS, 1, B, S, H, infer=False))[0]
    assert not any("LSTM" in n for n in trace.notes)


def test_weight_gradients_come_back_as_fp32_casts_last_weight_first() -> None:
    allocs = _allocs(_trace())
    start = next(i for i, a in enumerate(allocs) if a[0] == "new_zeros" and a[1] == PARAMS * 2)
    grads = [(s, d) for _, s, d in allocs[start + 1 :] if d == "float32"][: 4 * LAYERS]
    # H200: 16,384, 16,384, 16,777,216, 16,777,216 per layer (b_hh, b_ih, w_hh, w_ih in fp32),
    # the last layer first, after the fp16 weight gradient (+33,587,200)
    per_layer = [(4 * H * 4, "float32")] * 2 + [(4 * H * H * 4, "float32")] * 2
    assert grads == per_layer * LAYERS


def test_without_autocast_the_lstm_keeps_its_own_dtype() -> None:
    ops = [op for op, _, _ in _allocs(_trace("fp32"))]
    assert "cuDNN LSTM fp16 weight buffer (autocast)" not in ops
    assert "cuDNN LSTM reserve space" in ops


def test_a_gru_under_autocast_runs_cudnn_in_fp16_too() -> None:
    """``_cudnn_rnn_cast_reflatten`` takes every cuDNN RNN mode: a GRU's weights are copied to
    an fp16 buffer and its reserve space is fp16's (7 per layer less one, times B*S*H)."""
    work = Workload(
        build_model=lambda: nn.GRU(H, H, num_layers=LAYERS, batch_first=True),
        make_batch=lambda: torch.randn(B, S, H),
        loss_fn=lambda m, b: m(b)[0].float().sum(),
        optimizer="sgd",
        precision="bf16-mixed",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    allocs = _allocs(trace)
    ops = [op for op, _, _ in allocs]
    gru_params = LAYERS * (2 * 3 * H * H + 2 * 3 * H)
    assert allocs[ops.index("cuDNN GRU fp16 weight buffer (autocast)")][1] == gru_params * 2
    reserve = allocs[ops.index("cuDNN GRU reserve space")][1]
    assert reserve == reserve_bytes(LAYERS, 1, B, S, H, 2, "gru")
    workspace = allocs[ops.index("cuDNN GRU workspace")][1]
    call = LstmCall("fp16", 2, LAYERS, 1, B, S, H, infer=False, kind="gru")
    assert workspace == workspace_bytes(call)[0]
