"""The fused attention backward's workspace: cuDNN's attention, which an H200 runs for half
precision, takes one buffer (fp32 dQ accumulator, softmax sums, 256 bytes) and does not pad the
sequence to 128 as flash attention does, which takes two. H200 trace of
clip-vit-b32-bf16mixed-b128 (torch 2.11): 20,500,736 bytes = 128 x 8 x 77 x 64 x 4 +
128 x 8 x 77 x 4 + 256 for the 77-token text tower, where the padded size, 34,078,976, was
traced; 19,968,256 for the 50-patch vision tower (12 heads)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload

B, HEADS, D = 2, 4, 64
LABEL = "fused attention backward workspace (dQ accumulator, softmax sums)"


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(HEADS * D, 3 * HEADS * D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, D).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v)


def _workspaces(gpu: str, seq: int, label: str = LABEL) -> list[int]:
    work = Workload(
        build_model=_Attention,
        make_batch=lambda: torch.randn(B, seq, HEADS * D),
        loss_fn=lambda m, x: m(x).float().sum(),
        optimizer="sgd",
        precision="bf16",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu(gpu))
    return [
        e.size
        for e in trace.events
        if e.kind == "alloc" and e.info is not None and trace.infos[e.info].op.startswith(label)
    ]


def test_cudnn_attention_backward_takes_the_unpadded_sequence() -> None:
    assert _workspaces("h200", 77) == [B * HEADS * 77 * D * 4 + B * HEADS * 77 * 4 + 256]


def test_flash_attention_backward_pads_the_sequence_to_128() -> None:
    # an A100 runs flash attention (no cuDNN attention there): mha_bwd's softmax sums and dQ
    # accumulator, two buffers over the sequence padded to 128 (the H100 op sweep's direct
    # _flash_attention_backward calls: 8,192 and 262,144 bytes for 11 queries)
    sizes = _workspaces("a100", 77, "flash attention backward softmax")
    sizes += _workspaces("a100", 77, "flash attention backward dQ")
    assert sizes == [B * HEADS * 128 * 4, B * 128 * HEADS * D * 4]
