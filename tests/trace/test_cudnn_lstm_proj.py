"""An LSTM with projections (``proj_size``) is traced as the cuDNN call a GPU makes: its
reserve space and workspace are those an H200 allocated (torch 2.11, cuDNN 9.19; 64 probes,
``proj_size`` half the hidden size), its reserve space that an H100 allocated at another share
and length too (96 training probes), and what was not probed is bounded from above and said."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._rnn_sizes import LstmCall, proj_reserve_bytes, workspace_bytes
from memfit.trace._tracer import Trace, trace_workload
from memfit.workload._step import Workload

RESULTS = Path(__file__).parents[2] / "benchmarks/results"
RNN_PROBES = RESULTS / "2026-12-07-h200-probes-segmentation-sixth-rnn/rnn-probes.json.gz"
# P = 3H/8 at 64 and 256 steps (H100, torch 2.11, cuDNN 9.19)
SHARE_PROBES = RESULTS / "2026-12-08-h100-handwritten-int8-serving/lstm-proj-probe.json.gz"


def _probes() -> list[dict[str, Any]]:
    with gzip.open(RNN_PROBES, "rt") as fh:
        probes: list[dict[str, Any]] = json.load(fh)["proj"]["lstm"]
    return probes


def _element(p: dict[str, Any]) -> int:
    return 4 if p["dtype"] == "fp32" else 2


def _call(p: dict[str, Any], **changes: Any) -> LstmCall:
    dirs = 2 if p["bidirectional"] else 1
    fields = dict(
        dtype=p["dtype"], element=_element(p), layers=p["layers"], dirs=dirs, batch=p["batch"],
        seq=p["seq"], hidden=p["hidden"], infer=not p["train"], proj=p["proj"],
    )  # fmt: skip
    return LstmCall(**{**fields, **changes})


def _allocs(p: dict[str, Any]) -> list[int]:
    return [size for action, size in p["trace"] if action == "alloc"]


def test_the_reserve_space_is_every_training_probes_at_both_shares() -> None:
    with gzip.open(SHARE_PROBES, "rt") as fh:
        other: list[dict[str, Any]] = json.load(fh)["lstm"]
    trained = [p for p in [*_probes(), *other] if p["train"]]
    for p in trained:
        dirs = 2 if p["bidirectional"] else 1
        steps = p["batch"] * p["seq"]
        size = proj_reserve_bytes(p["layers"], dirs, steps, p["hidden"], p["proj"], _element(p))
        assert size in _allocs(p), (p["hidden"], p["proj"], p["layers"], p["seq"])
    assert len(trained) == 32 + 96
    assert {p["proj"] / p["hidden"] for p in trained} == {0.5, 0.375}


def test_the_workspace_is_every_probes() -> None:
    """The workspace is the sixth allocation of each probe's call (after h0, c0, the input, the
    output, hy and cy), in training and in inference alike."""
    for p in _probes():
        ours, said = workspace_bytes(_call(p))
        assert abs(ours - _allocs(p)[6]) <= 128, (p["hidden"], p["layers"], ours)
        assert said == []
    assert len(_probes()) == 64


def test_what_was_not_probed_is_bounded_from_above_and_said() -> None:
    p = next(q for q in _probes() if q["train"] and q["hidden"] == 512 and q["layers"] == 1)
    probed, _ = workspace_bytes(_call(p))
    longer, said = workspace_bytes(_call(p, seq=256))
    assert longer == pytest.approx(4 * probed, rel=1e-6)
    assert said == ["with projections at 256 steps bounded from 64 steps'"]
    _, said = workspace_bytes(_call(p, layers=2))
    assert said == ["2 layers with projections interpolated"]  # linear in the layers
    narrow, said = workspace_bytes(_call(p, proj=128))
    assert narrow >= max(probed, workspace_bytes(_call(p, proj=0))[0])
    assert said == ["a projection of 128 of 512 units bounded from above"]
    _, said = workspace_bytes(_call(p, dtype="bf16"))
    assert said == ["with projections in bf16 taken as fp16's"]


def _trace(p: dict[str, Any]) -> Trace:
    h, dirs = p["hidden"], 2 if p["bidirectional"] else 1
    work = Workload(
        build_model=lambda: nn.LSTM(
            h, h, num_layers=p["layers"], bidirectional=dirs == 2, proj_size=p["proj"]
        ),
        make_batch=lambda: torch.randn(p["seq"], p["batch"], h),
        loss_fn=lambda m, b: m(b)[0].float().sum(),
        optimizer="sgd",
        precision=p["dtype"],
        mode="train" if p["train"] else "infer",
        steps=1,
    )
    return trace_workload(work, resolve_gpu("h200"))


@pytest.mark.parametrize("index", [0, 6, 21, 58])
def test_the_call_allocates_what_the_gpu_did(index: int) -> None:
    """From the output to the reserve space, the traced forward call allocates the sizes the
    GPU did (the workspace within the fit's bytes), and the backward its flat weight gradient;
    nothing is said of cell kernels."""
    p = _probes()[index]
    trace = _trace(p)
    ours = [e.size for e in trace.events[trace.steps_start :] if e.kind == "alloc"]
    real = _allocs(p)
    out = real[3]  # the output: seq * batch * directions * proj elements
    call = real[3 : 8 if p["train"] else 7]  # output, hy, cy, workspace (, reserve)
    windows = [ours[i : i + len(call)] for i, size in enumerate(ours) if size == out]
    assert any(
        len(w) == len(call) and all(abs(a - b) <= 512 for a, b in zip(w, call, strict=True))
        for w in windows
    ), (call, windows)
    if p["train"]:
        dirs = 2 if p["bidirectional"] else 1
        h, proj, layers = p["hidden"], p["proj"], p["layers"]
        first = 4 * h * (h + proj + 2) + proj * h
        later = 4 * h * (dirs * proj + proj + 2) + proj * h
        weight_grad = dirs * (first + (layers - 1) * later) * _element(p)
        assert weight_grad in real and weight_grad in ours
    assert not any("cell kernels" in n for n in trace.notes), trace.notes
    # a share probed and its length: nothing to say; inference keeps no reserve space
    assert not any("cuDNN LSTM" in n for n in trace.notes if "interpolated" not in n), trace.notes


def test_inference_says_nothing_of_a_reserve_space_it_does_not_keep() -> None:
    work = Workload(
        build_model=lambda: nn.LSTM(256, 512, proj_size=128, batch_first=True),
        make_batch=lambda: torch.randn(16, 64, 256),
        loss_fn=lambda m, b: m(b)[0].sum(),
        mode="infer",
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    names = [trace.infos[e.info].op for e in trace.events if e.kind == "alloc"]
    assert "cuDNN LSTM reserve space" not in names
    assert not any("reserve space" in n for n in trace.notes), trace.notes
    assert any("a projection of 128 of 512 units bounded" in n for n in trace.notes)
