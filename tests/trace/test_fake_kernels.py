"""memfit's own kernels for ops without a meta kernel: CTC loss and torchvision's nms.

Each is traced in a small model and its allocations compared with what the CUDA kernel
allocates (ATen's cuda/LossCTC.cu, torchvision's cuda/nms_kernel.cu): outputs, temporaries,
and what autograd keeps for backward.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from memfit import TraceError, estimate
from memfit._gpus import resolve_gpu
from memfit.trace import Trace, trace_workload
from memfit.trace._kernels import KernelModel
from memfit.workload import make_workload

T, B, C, S = 50, 3, 20, 10  # time steps, batch, classes, target width
LENGTHS = [S, S - 2, S - 5]


class _Ctc(nn.Module):
    """Log-probabilities (T, B, C) from a linear layer, and their CTC loss."""

    def __init__(self, known_lengths: bool = True, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.proj = nn.Linear(8, C)
        self.known_lengths = known_lengths
        self.dtype = dtype

    def forward(
        self, x: torch.Tensor, targets: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        log_probs = self.proj(x).log_softmax(-1).to(self.dtype)
        if not self.known_lengths:  # computed from the weights: no value before the GPU runs
            lengths = (self.proj.weight[:B, 0].abs() * 0 + 2).long()
        steps = torch.full((B,), T, dtype=lengths.dtype)
        return F.ctc_loss(log_probs, targets, steps, lengths)


def _ctc_batch() -> tuple[torch.Tensor, ...]:
    return torch.randn(T, B, 8), torch.randint(1, C, (B, S)), torch.tensor(LENGTHS)


def _cudnn_batch() -> tuple[torch.Tensor, ...]:
    """What cuDNN's CTC loss takes: concatenated int32 targets, int32 lengths."""
    targets = torch.randint(1, C, (sum(LENGTHS),), dtype=torch.int32)
    return torch.randn(T, B, 8), targets, torch.tensor(LENGTHS, dtype=torch.int32)


def _trace(model: Any, batch: Any, **options: Any) -> Trace:
    if options.get("mode") != "infer":
        options.update(loss_fn=lambda m, b: m(*b), optimizer="sgd")
    return trace_workload(make_workload(model, batch, **options), resolve_gpu("h100"))


def _lifetimes(trace: Trace, needle: str) -> list[tuple[str, int, str, int, int]]:
    """(op, bytes, phase, alloc event, free event) of each allocation whose op has ``needle``."""
    found: dict[int, list[object]] = {}
    for index, event in enumerate(trace.events):
        if event.kind == "alloc" and event.info is not None:
            info = trace.infos[event.info]
            if needle in info.op.lower():
                found[event.block] = [info.op, event.size, info.phase, index, -1]
        elif event.kind == "free" and event.block in found:
            found[event.block][4] = index
    return [tuple(v) for v in found.values()]  # type: ignore[misc]


def test_ctc_loss_allocates_what_the_cuda_kernel_does_forward_and_backward() -> None:
    allocs = _lifetimes(_trace(_Ctc, _ctc_batch), "ctc")
    alpha = B * T * (2 * max(LENGTHS) + 1) * 4  # log_alpha: the longest target decides
    forward = [(op, n, phase) for op, n, phase, _, _ in allocs if phase == "step1.forward"]
    assert forward == [
        ("CTC loss target lengths", 8 * B, "step1.forward"),
        ("CTC loss input lengths", 8 * B, "step1.forward"),
        ("CTC loss target offsets", 8 * B, "step1.forward"),
        ("_ctc_loss", alpha, "step1.forward"),  # log_alpha before the loss, as CUDA
        ("_ctc_loss", 4 * B, "step1.forward"),
    ]
    backward = [(op, n) for op, n, phase, _, _ in allocs if phase == "step1.backward"]
    assert backward == [
        ("CTC loss target lengths", 8 * B),
        ("CTC loss input lengths", 8 * B),
        ("CTC loss target offsets", 8 * B),
        ("CTC loss backward log_beta", alpha),
        ("_ctc_loss_backward", T * B * C * 4),  # the gradient of log_probs
    ]
    # autograd keeps log_alpha and the loss until the backward has used them
    saved = [a for a in allocs if a[0] == "_ctc_loss"]
    backward_op = next(a for a in allocs if a[0] == "_ctc_loss_backward")
    assert all(a[4] > backward_op[3] for a in saved)
    temporaries = [a for a in allocs if a[0].startswith("CTC loss")]
    assert all(a[4] != -1 and a[4] - a[3] <= 6 for a in temporaries)  # freed as the op ends


def test_ctc_target_lengths_without_values_are_bounded_by_the_targets() -> None:
    trace = _trace(lambda: _Ctc(known_lengths=False), _ctc_batch)
    alpha = next(n for op, n, phase, _, _ in _lifetimes(trace, "_ctc_loss") if op == "_ctc_loss")
    assert alpha == B * T * (2 * S + 1) * 4
    assert any("ctc_loss target lengths in _Ctc have no known value" in n for n in trace.notes)


def _backward_scratch(steps: int, batch: int, classes: int, zero_infinity: bool) -> list[list[int]]:
    log_probs = torch.empty(steps, batch, classes, device="meta")
    alpha = torch.empty(batch, steps, 2 * S + 1, device="meta")
    args = (
        torch.empty(batch, device="meta"),
        log_probs,
        None,
        [],
        [],
        None,
        alpha,
        0,
        zero_infinity,
    )
    groups = KernelModel(90).scratch(torch.ops.aten._ctc_loss_backward.default, args, {})
    return [[item[0] for item in group] for group in groups]


def test_ctc_backward_of_a_large_problem_takes_logsumexp_buffers() -> None:
    # 2 x 200 + 2.4 x 16 + 0.2 x 32 = 444: PyTorch's one collecting kernel, nothing else
    assert _backward_scratch(200, 16, 32, zero_infinity=False) == []
    rows = 16 * 210
    blanks = rows * (S + 1) * 4
    assert _backward_scratch(210, 16, 32, zero_infinity=False) == [
        [blanks, rows * 4, blanks, rows * 4]
    ]
    with_where = _backward_scratch(210, 16, 32, zero_infinity=True)
    assert with_where[1] == [16, 4, 210 * 16 * 32 * 4]  # the gradient replaced by a where


def test_ctc_loss_in_half_precision_is_refused_as_on_the_gpu() -> None:
    with pytest.raises(TraceError, match="ctc_loss_cuda\" not implemented for 'BFloat16'"):
        estimate(lambda: _Ctc(dtype=torch.bfloat16), _ctc_batch)


def test_cudnn_eligible_ctc_arguments_are_noted() -> None:
    eligible = _trace(_Ctc, _cudnn_batch)
    assert any(
        "ctc_loss in _Ctc has arguments for which a GPU may run cuDNN" in n for n in eligible.notes
    )
    # its log_alpha is PyTorch's kernel's all the same (the longest target decides)
    alpha = B * T * (2 * max(LENGTHS) + 1) * 4
    assert alpha in [n for op, n, *_ in _lifetimes(eligible, "_ctc_loss") if op == "_ctc_loss"]
    assert not any("cuDNN's CTC" in n for n in _trace(_Ctc, _ctc_batch).notes)
    with torch.backends.cudnn.flags(enabled=False):
        assert not any("cuDNN's CTC" in n for n in _trace(_Ctc, _cudnn_batch).notes)


def test_wav2vec2_for_ctc_trains() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        vocab_size=12,
        mask_time_prob=0.0,
    )
    est = estimate(
        lambda: transformers.Wav2Vec2ForCTC(config),
        lambda: {"input_values": torch.randn(2, 4000), "labels": torch.randint(1, 12, (2, 20))},
        optimizer="sgd",
    )
    assert est.peak_allocated > 0


class _Detector(nn.Module):
    """Boxes and scores from the weights (no values before the GPU runs), or from the batch."""

    def __init__(self, boxes: int) -> None:
        super().__init__()
        self.head = nn.Linear(4, 5)
        self.boxes = boxes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torchvision = pytest.importorskip("torchvision")
        if self.boxes:
            out = self.head(x)
            corners = out[:, :2].abs()
            boxes, scores = torch.cat([corners, corners + out[:, 2:4].abs()], 1), out[:, 4]
        else:
            boxes, scores = x, x[:, 0]
        kept = torchvision.ops.nms(boxes, scores, 0.5)
        return boxes[kept]


def test_nms_without_values_keeps_every_box_and_counts_its_buffers() -> None:
    pytest.importorskip("torchvision")
    n = 5000
    trace = _trace(lambda: _Detector(n), lambda: torch.rand(n, 4), mode="infer")
    sizes = {op: size for op, size, *_ in _lifetimes(trace, "nms")}
    assert sizes["nms"] == 8 * n  # every box kept: an upper bound
    assert sizes["nms IoU bit mask"] == 8 * n * ((n + 63) // 64)
    assert sizes["nms boxes in score order"] == n * 4 * 4
    assert sizes["nms keep mask"] == n
    assert sizes["nms sort storage"] > 0  # more than 4,096 scores: cub's radix sort
    assert any(n.startswith("torchvision::nms in _Detector keeps as many") for n in trace.notes)


def test_nms_of_boxes_with_values_keeps_what_real_nms_keeps() -> None:
    torchvision = pytest.importorskip("torchvision")
    boxes = torch.tensor([[0.0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 9]])
    kept = torchvision.ops.nms(boxes, boxes[:, 0], 0.5).numel()
    trace = _trace(lambda: _Detector(0), lambda: boxes, mode="infer")
    assert [size for op, size, *_ in _lifetimes(trace, "nms") if op == "nms"] == [8 * kept]
    assert not any("torchvision::nms" in note for note in trace.notes)


def test_a_torchvision_detector_estimates_inference() -> None:
    detection = pytest.importorskip("torchvision.models.detection")
    est = estimate(
        lambda: detection.fasterrcnn_mobilenet_v3_large_fpn(
            weights=None, weights_backbone=None, num_classes=3
        ),
        lambda: ([torch.rand(3, 320, 320), torch.rand(3, 320, 320)],),
        mode="infer",
    )
    assert est.peak_allocated > 0
    assert any(note.startswith("torchvision::nms in rpn keeps as many boxes") for note in est.notes)


def test_nms_refuses_bf16_boxes_as_cuda_does() -> None:
    # the H100 refused it: "nms_kernel" not implemented for 'BFloat16' (torchvision 0.26)
    pytest.importorskip("torchvision")
    from memfit.trace._fake_kernels import fake_kernel

    nms = fake_kernel(torch.ops.torchvision.nms.default)
    assert nms is not None
    boxes = torch.empty(10, 4, dtype=torch.bfloat16, device="meta")
    scores = torch.empty(10, dtype=torch.bfloat16, device="meta")
    with pytest.raises(NotImplementedError, match="BFloat16"):
        nms((boxes, scores, 0.5), {}, None)
