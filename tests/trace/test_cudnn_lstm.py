"""nn.LSTM is traced as the cuDNN call a GPU makes: the allocations of its forward match, one by
one, the allocator traces recorded on an H200 for the same configurations (probe data committed
in benchmarks/results), with the workspace within the fit's few hundred bytes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._rnn_sizes import reserve_bytes
from memfit.trace._tracer import Trace, trace_workload
from memfit.workload._step import Workload

RESULTS = Path(__file__).parents[2] / "benchmarks/results"
PROBE = RESULTS / "2026-11-30-h200-estimate-accuracy/cudnn_probe.json.gz"  # fp32 and bf16
# fp16, 1-4 layers, training and inference (what autocast runs)
PROBE_FP16 = RESULTS / "2026-12-01-h200-user-steps-compiled/cudnn/cudnn_probe_families.json.gz"


def _load(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        probes: list[dict[str, Any]] = json.load(fh)["lstm"]
    return probes


def _probes() -> list[dict[str, Any]]:
    # a spread over every dimension: hidden, layers, batch, sequence, dtype, direction
    fp16 = [p for p in _load(PROBE_FP16) if p["train"]]
    return [p for i, p in enumerate(_load(PROBE)) if i % 9 == 0] + fp16[::9]


def _trace(p: dict[str, Any]) -> Trace:
    h = p["hidden"]
    build = lambda: nn.LSTM(  # noqa: E731
        h, h, num_layers=p["layers"], batch_first=True, bidirectional=p["bidirectional"]
    )
    x = torch.randn(p["batch"], p["seq"], h)
    work = Workload(
        build_model=build,
        make_batch=lambda: x,
        loss_fn=lambda m, b: m(b)[0].float().sum(),
        optimizer="sgd",
        precision=p["dtype"],
        steps=1,
    )
    return trace_workload(work, resolve_gpu("h200"))


def _forward_call(events: list[tuple[str, int]], copy: int, out: int) -> list[tuple[str, int]]:
    """From the input's copy in sequence order (then the output) to the free of that copy."""
    start = next(
        i
        for i in range(len(events) - 1)
        if events[i] == ("a", copy) and events[i + 1] == ("a", out)
    )
    end = start + next(i for i, e in enumerate(events[start + 1 :], 1) if e == ("f", copy))
    return events[start : end + 1]


def _name(p: dict[str, Any]) -> str:
    keys = ("hidden", "layers", "batch", "seq", "dtype", "bidirectional")
    return "-".join(str(p[k]) for k in keys)


@pytest.mark.parametrize("probe", _probes(), ids=_name)
def test_forward_matches_the_gpu_allocation_for_allocation(probe: dict[str, Any]) -> None:
    trace = _trace(probe)
    sizes: dict[int, int] = {}
    traced: list[tuple[str, int]] = []
    for e in trace.events[trace.steps_start :]:
        if e.kind == "alloc":
            sizes[e.block] = e.size
            traced.append(("a", e.size))
        elif e.block in sizes:
            traced.append(("f", sizes[e.block]))
    real = [("a" if a == "alloc" else "f", s) for a, s in probe["trace"]]
    element = 4 if probe["dtype"] == "fp32" else 2
    copy = probe["batch"] * probe["seq"] * probe["hidden"] * element  # input in sequence order
    out = copy * (2 if probe["bidirectional"] else 1)
    ours, theirs = _forward_call(traced, copy, out), _forward_call(real, copy, out)
    assert len(ours) == len(theirs)
    for (kind, size), (real_kind, real_size) in zip(ours, theirs, strict=True):
        assert kind == real_kind
        assert abs(size - real_size) <= 512  # the workspace fit; everything else is exact


def test_reserve_space_formula_holds_on_every_probe() -> None:
    probes = _load(PROBE) + [p for p in _load(PROBE_FP16) if p["train"]]
    for p in probes:
        e = 4 if p["dtype"] == "fp32" else 2
        dirs = 2 if p["bidirectional"] else 1
        size = reserve_bytes(p["layers"], dirs, p["batch"], p["seq"], p["hidden"], e)
        assert ["alloc", size] in p["trace"]


def test_reserve_space_lives_from_forward_to_backward_and_is_named() -> None:
    probe = _probes()[0]
    trace = _trace(probe)
    names = [trace.infos[e.info].op for e in trace.events if e.kind == "alloc"]
    assert "cuDNN LSTM reserve space" in names
    assert "cuDNN LSTM weight gradient workspace" in names
    assert not any("LSTM" in n for n in trace.notes)


RNN_PROBES = RESULTS / "2026-12-07-h200-probes-segmentation-sixth-rnn/rnn-probes.json.gz"


def _packed_probes() -> list[dict[str, Any]]:
    with gzip.open(RNN_PROBES, "rt") as fh:
        runs = json.load(fh)
    return [p for name in ("packed-lstm", "packed-gru") for p in runs[name]["lstm"]]


def test_a_packed_batch_keeps_its_tokens_reserve_and_a_bounded_workspace() -> None:
    """H200 probes of packed LSTMs and GRUs (1-2 layers, both directions, hidden 256-1024,
    inputs once and twice it, fp32 and fp16): in training the reserve space is the padded
    call's with the tokens in place of B*S, exact, and the workspace never above the fit's."""
    from memfit.trace._rnn_sizes import LstmCall, workspace_bytes

    checked = 0
    for p in _packed_probes():
        if not p["train"]:
            continue
        e = 4 if p["dtype"] == "fp32" else 2
        dirs = 2 if p["bidirectional"] else 1
        tokens = sum(p["lengths"])
        reserve = reserve_bytes(p["layers"], dirs, tokens, 1, p["hidden"], e, p["kind"])
        allocs = [size for action, size in p["trace"] if action == "alloc"]
        assert reserve in allocs, _name(p)
        real = allocs[allocs.index(reserve) - 1]
        call = LstmCall(
            p["dtype"], e, p["layers"], dirs, p["batch"], p["seq"], p["hidden"], False,
            p["input"], p["kind"], tokens,
        )  # fmt: skip
        ours, said = workspace_bytes(call)
        assert real <= ours <= 4.5 * real, (_name(p), ours, real)
        assert "a packed batch's bounded from above" in said
        checked += 1
    assert checked == 170


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_a_packed_batch_is_traced_as_its_cudnn_call(kind: str) -> None:
    """A packed fp32 batch (16 sequences of 64 down to 16 steps) through a 1-layer LSTM or GRU
    of 512 units: the output, the reserve space and the flat weight gradient are the sizes the
    H200 allocated for it, the workspace bounds its from above, and the notes say so."""
    probe = next(
        p
        for p in _packed_probes()
        if (p["kind"], p["dtype"], p["layers"], p["bidirectional"], p["train"])
        == (kind, "fp32", 1, False, True)
        and (p["batch"], p["seq"], p["hidden"], p["input"]) == (16, 64, 512, 512)
    )
    lengths = probe["lengths"]

    def loss(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(b, lengths, batch_first=True)
        return m(packed)[0].data.sum()

    cls = nn.LSTM if kind == "lstm" else nn.GRU
    work = Workload(
        build_model=lambda: cls(512, 512, batch_first=True),
        make_batch=lambda: torch.randn(16, 64, 512),
        loss_fn=loss,
        optimizer="sgd",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    ours = [e.size for e in trace.events if e.kind == "alloc"]
    real = [size for action, size in probe["trace"] if action == "alloc"]
    tokens = sum(lengths)
    reserve = reserve_bytes(1, 1, tokens, 1, 512, 4, kind)
    gates = 4 if kind == "lstm" else 3
    weight_grad = gates * 512 * (512 + 512 + 2) * 4
    for size in (tokens * 512 * 4, reserve, weight_grad):
        assert size in real and size in ours, size
    workspace = real[real.index(reserve) - 1]
    assert workspace <= ours[ours.index(reserve) - 1]
    assert not any("cell kernels" in n for n in trace.notes)
    assert any("a packed batch's bounded from above" in n for n in trace.notes)


def test_inference_takes_no_reserve_space_and_its_own_probed_workspace() -> None:
    work = Workload(
        build_model=lambda: nn.LSTM(64, 64, num_layers=2, batch_first=True),
        make_batch=lambda: torch.randn(4, 16, 64),
        loss_fn=lambda m, b: m(b)[0].sum(),
        mode="infer",
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    names = [trace.infos[e.info].op for e in trace.events if e.kind == "alloc"]
    assert "cuDNN LSTM workspace" in names
    assert "cuDNN LSTM reserve space" not in names
    # inference calls were probed: their own fit, not training's
    assert not any("inference workspace taken from training's" in n for n in trace.notes)


GRU_PROBE = RESULTS / "2026-12-07-h100-rnn-probes/gru-probe.json.gz"


def test_every_gru_probes_reserve_and_workspace() -> None:
    """H100 probes of nn.GRU (hidden 256 and 1024, inputs once and twice it, 1-2 layers, both
    directions, fp32/bf16/fp16, training and inference): the reserve space is exact, and the
    workspace too (to 4 KiB of up to 100 MB: two-layer one-direction training's engine is not
    exactly linear in the batch), but in training with an input other than the hidden size
    (bounded)."""
    from memfit.trace._rnn_sizes import LstmCall, workspace_bytes

    counts = {"exact": 0, "bounded": 0}
    for p in _load(GRU_PROBE):
        e = 4 if p["dtype"] == "fp32" else 2
        dirs = 2 if p["bidirectional"] else 1
        allocs = [size for action, size in p["trace"] if action == "alloc"]
        b, s, h, size = p["batch"], p["seq"], p["hidden"], p["input"]
        if p["train"]:
            reserve = reserve_bytes(p["layers"], dirs, b, s, h, e, "gru")
            assert reserve in allocs, _name(p)
            real = allocs[allocs.index(reserve) - 1]
        else:
            real = _real_workspace(p)
        call = LstmCall(
            p["dtype"], e, p["layers"], dirs, b, s, h, not p["train"], size, "gru"
        )  # fmt: skip
        ours, said = workspace_bytes(call)
        if size == h or not p["train"]:
            assert abs(ours - real) <= 4096, (_name(p), size, ours, real)
            counts["exact"] += 1
        else:
            assert real <= ours <= 1.25 * real, (_name(p), size, ours, real)
            assert "an input size above the hidden size bounded from above" in said
            counts["bounded"] += 1
    assert counts == {"exact": 288, "bounded": 96}


def test_a_gru_is_traced_as_its_cudnn_call() -> None:
    """A 2-layer bidirectional fp32 GRU in training: its reserve space and its workspace are
    the ones the H100 probe recorded for the same configuration."""
    probe = next(
        p
        for p in _load(GRU_PROBE)
        if (p["dtype"], p["layers"], p["bidirectional"], p["train"], p["input"], p["hidden"])
        == ("fp32", 2, True, True, 256, 256)
        and (p["batch"], p["seq"]) == (16, 64)
    )
    work = Workload(
        build_model=lambda: nn.GRU(256, 256, num_layers=2, batch_first=True, bidirectional=True),
        make_batch=lambda: torch.randn(16, 64, 256),
        loss_fn=lambda m, b: m(b)[0].float().sum(),
        optimizer="sgd",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h100"))
    ours = {e.size for e in trace.events if e.kind == "alloc"}
    allocs = [size for action, size in probe["trace"] if action == "alloc"]
    reserve = reserve_bytes(2, 2, 16, 64, 256, 4, "gru")
    assert reserve in ours and allocs[allocs.index(reserve) - 1] in ours
    assert not any("GRU ran PyTorch's cell kernels" in n for n in trace.notes)


# every LSTM probe: hidden sizes 32 to 1024, 1-4 layers, batches up to 32,768, and input
# sizes other than the hidden size (0.5 to 4 times)
ALL_PROBES = [
    PROBE,
    RESULTS / "2026-11-30-h200-finder-monitor-cudnn/cudnn_probe_lstm.json.gz",
    PROBE_FP16,
    RESULTS / "2026-12-07-h200-lstm-probes/hidden-lstm-probe.json.gz",
    RESULTS / "2026-12-07-h200-lstm-probes/sequencer-lstm-probe.json.gz",
    RESULTS / "2026-12-07-h100-rnn-probes/lstm-inputs-probe.json.gz",
]


def _real_workspace(p: dict[str, Any]) -> int:
    e = 4 if p["dtype"] == "fp32" else 2
    dirs = 2 if p["bidirectional"] else 1
    if p.get("train", True):
        reserve = reserve_bytes(p["layers"], dirs, p["batch"], p["seq"], p["hidden"], e)
        allocs = [size for action, size in p["trace"] if action == "alloc"]
        return allocs[allocs.index(reserve) - 1]
    live: dict[int, int] = {}
    freed = []
    for action, size in p["trace"]:
        if action == "alloc":
            live[size] = live.get(size, 0) + 1
        elif live.get(size):
            live[size] -= 1
            freed.append(size)
    return max(freed)


def test_the_workspace_is_every_probes_or_bounds_it_from_above() -> None:
    from memfit.trace._rnn_sizes import LstmCall, workspace_bytes

    counts = {"exact": 0, "bounded": 0}
    for path in ALL_PROBES:
        for p in _load(path):
            if p.get("kind", "lstm") != "lstm":
                continue
            e = 4 if p["dtype"] == "fp32" else 2
            dirs = 2 if p["bidirectional"] else 1
            size = p.get("input", p["hidden"])
            call = LstmCall(
                p["dtype"], e, p["layers"], dirs, p["batch"], p["seq"], p["hidden"],
                not p.get("train", True), size,
            )  # fmt: skip
            ours, _ = workspace_bytes(call)
            real = _real_workspace(p)
            if size == p["hidden"] or not p.get("train", True):
                assert abs(ours - real) <= 8, (_name(p), size, ours, real)
                counts["exact"] += 1
            else:  # training with another input size: bounded, never under
                assert real <= ours <= 1.2 * real, (_name(p), size, ours, real)
                counts["bounded"] += 1
    assert counts["exact"] > 1500 and counts["bounded"] > 400


def test_what_was_not_probed_is_said() -> None:
    from memfit.trace._rnn_sizes import LstmCall, workspace_bytes

    _, said = workspace_bytes(LstmCall("bf16", 2, 1, 2, 64, 32, 48, False, 192))
    assert said == ["an input size above the hidden size bounded from above"]
    _, said = workspace_bytes(LstmCall("fp32", 4, 6, 1, 64, 32, 16, True))
    assert said == ["hidden size 16 outside the probed ones", "6 layers extrapolated"]
    _, said = workspace_bytes(LstmCall("fp32", 4, 1, 1, 64, 32, 224, True))
    assert said == []  # between two probed engines: the larger, nothing to say


def test_dropout_between_layers_adds_its_masks_to_the_reserve_space() -> None:
    """H200 probes of 2-layer LSTMs and GRUs with dropout 0.1 between the layers (padded and
    packed, both directions, fp32 and fp16): the reserve space holds a bit per element of the
    second layer's input over B*S steps (the longest sequence's, packed) besides its own."""
    from memfit.trace._rnn import RnnHooks, _dropout_masks

    with gzip.open(RNN_PROBES, "rt") as fh:
        probes = json.load(fh)["dropout"]["lstm"]
    made: list[int] = []
    hooks = RnnHooks(alloc=lambda n, _: made.append(n) or 0, free=lambda _: None,
                     name=lambda *_: None, notes=set())  # fmt: skip
    for p in probes:
        e = 4 if p["dtype"] == "fp32" else 2
        dirs = 2 if p["bidirectional"] else 1
        steps = sum(p["lengths"]) if "lengths" in p else p["batch"] * p["seq"]
        reserve = reserve_bytes(p["layers"], dirs, steps, 1, p["hidden"], e, p["kind"])
        masks = _dropout_masks(p["layers"], dirs, p["batch"], p["seq"], p["hidden"], hooks)
        assert reserve + masks in [size for action, size in p["trace"] if action == "alloc"]
    assert len(probes) == 64
    assert len(made) == 1  # the dropout state, once


def test_an_lstm_with_dropout_makes_cudnns_dropout_state_once() -> None:
    work = Workload(
        build_model=lambda: nn.LSTM(64, 64, num_layers=2, dropout=0.1, batch_first=True),
        make_batch=lambda: torch.randn(4, 16, 64),
        loss_fn=lambda m, b: m(b)[0].sum(),
        optimizer="sgd",
        steps=2,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    names = [trace.infos[e.info].op for e in trace.events if e.kind == "alloc"]
    assert names.count("cuDNN dropout state") == 1
