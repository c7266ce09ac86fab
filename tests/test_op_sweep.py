"""The op sweep (benchmarks/op_sweep.py): one op call traced, verdicts, the measure loop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import op_sweep
import op_sweep_cases as cases
from op_sweep_compare import classify, compare_rows, tokens
from op_sweep_sides import trace_case

cases.testing_importable()
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402


class _Op:
    """A stand-in OpInfo: calls ``fn`` on a sample, as OpInfo's ``__call__`` does."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x, *args, **kwargs):
        return self.fn(x, *args, **kwargs)


def _allocs(events):
    return [e[2] for e in events if e[0] == "a"]


def test_add_forward_allocates_its_output():
    x, y = torch.randn(256, 1024), torch.randn(256, 1024)
    got = trace_case(_Op(torch.add), SampleInput(x, args=(y,)), "forward")
    assert tokens(got["events"]) == [("+", 256 * 1024 * 4), ("-", 256 * 1024 * 4)]


def test_matmul_forward_in_bf16_allocates_its_output():
    a = torch.randn(512, 256, dtype=torch.bfloat16)
    b = torch.randn(256, 128, dtype=torch.bfloat16)
    got = trace_case(_Op(torch.matmul), SampleInput(a, args=(b,)), "forward")
    assert _allocs(got["events"]) == [512 * 128 * 2]
    assert got["persistent"], "the cuBLAS workspace of the first launch is listed apart"


def test_a_view_of_an_input_allocates_nothing():
    """The GPU made the inputs before recording: a view of one is no allocation, and the
    backward's only tensor is the gradient it is given."""
    x = torch.randn(256, 1024, requires_grad=True)
    assert trace_case(_Op(torch.t), SampleInput(x), "forward")["events"] == []
    got = trace_case(_Op(torch.t), SampleInput(x), "backward")
    assert _allocs(got["events"]) == [256 * 1024 * 4]


def test_softmax_backward_allocations():
    n = 128 * 1024 * 4  # one (128, 1024) float32 tensor
    x = torch.randn(128, 1024, requires_grad=True)
    got = trace_case(_Op(torch.softmax), SampleInput(x, args=(-1,)), "backward")
    sizes = _allocs(got["events"])
    # output, the gradient given (ones_like), the input gradient: each input-sized
    assert sizes[:2] == [n, n]
    assert n in sizes[2:]
    assert all(size == n for size in sizes)
    assert got["peak_allocated"] >= 3 * n


def test_classify_matched_and_each_cause():
    real = [["a", 10, 4096], ["a", 11, 1000], ["f", 11, 1000], ["f", 10, 4096]]
    same = [["a", 1, 4096, "x"], ["a", 2, 1000, "y"], ["f", 2, 0], ["f", 1, 0]]
    assert classify(real, same) == ("matched", "")
    extra = [*same[:2], ["a", 3, 64, "ws:workspace"], ["f", 3, 0], *same[2:]]
    verdict, detail = classify(real, extra)
    assert verdict == "mismatched" and detail.startswith("extra alloc: 64 (ws:workspace)")
    assert classify(real, [*same[:1], ["f", 1, 0]])[1].startswith("missing alloc")
    bigger = [["a", 1, 4096, "x"], ["a", 2, 1024, "y"], ["f", 2, 0], ["f", 1, 0]]
    assert classify(real, bigger)[1].startswith("size differs (rounded equal)")
    swapped = [["a", 2, 1000, "y"], ["a", 1, 4096, "x"], ["f", 2, 0], ["f", 1, 0]]
    assert classify(real, swapped)[1] == "order differs"
    late = [["a", 1, 4096, "x"], ["a", 2, 1000, "y"], ["f", 1, 0], ["f", 2, 0]]
    assert classify(real, late)[1] == "free timing differs"


def test_compare_rows_not_sampled_and_errors():
    ok = {"status": "ok", "events": [["a", 1, 8], ["f", 1, 8]]}
    skipped = {"status": "not_sampled", "reason": "dtype not supported on CUDA"}
    assert compare_rows(skipped, ok)["verdict"] == "not sampled"
    failed = {"status": "error", "error": "NotImplementedError: _unique2"}
    assert compare_rows(ok, failed) == {
        "verdict": "error",
        "detail": "trace: NotImplementedError: _unique2",
    }
    assert compare_rows(ok, ok)["verdict"] == "matched"
    # a dtype the GPU lacks is not sampled, whatever the trace made of it
    assert compare_rows(skipped, failed)["verdict"] == "not sampled"
    assert compare_rows(None, ok) == {"verdict": "missing", "detail": "no gpu row"}


def test_scaled_grows_opinfo_sizes_and_restores_them():
    add = next(op for op in cases.op_db() if op.name == "add" and not op.variant_test_name)
    small = max(cases.sizes_of(add, torch.float32, 1, "meta"))
    big = max(cases.sizes_of(add, torch.float32, 4, "meta"))
    assert big >= 16 * small
    again = max(cases.sizes_of(add, torch.float32, 1, "meta"))
    assert again == small


@pytest.mark.parametrize("cmd", ["measure", "trace"])
def test_sweep_runs_resumes_and_compares(tmp_path, cmd):
    out = tmp_path / f"{cmd}.jsonl"
    argv = [cmd, str(out), "--ops", "softmax", "--dtypes", "fp32", "--per-op", "1"]
    op_sweep.main([*argv, "--dry-run"] if cmd == "measure" else argv)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    done = [r for r in rows if r.get("status") == "ok"]
    assert {r["id"].rsplit("|", 1)[0] for r in done} >= {
        "softmax||fp32|forward",
        "softmax||fp32|backward",
    }
    assert all(r["input_bytes"] >= cases.MIN_BYTES for r in done)
    op_sweep.main([*argv, "--dry-run"] if cmd == "measure" else argv)  # resumes: nothing new
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(again) == len(rows) + 1  # one more meta row
    if cmd == "trace":
        summary = op_sweep.compare([out], [out], tmp_path / "cmp")
        assert summary["verdicts"].get("matched", 0) == len(done)
        assert (tmp_path / "cmp" / "table.md").read_text().count("softmax") == 2


def test_compare_gives_a_refused_group_to_its_traced_samples(tmp_path):
    events = [["a", 1, 2048], ["f", 1, 0]]
    traced = [
        {"id": "matmul||bf16|forward|3", "status": "ok", "events": events},
        {"id": "matmul||fp32|forward|3", "status": "ok", "events": events},
    ]
    measured = [
        {"id": "matmul||bf16|forward|-", "status": "not_sampled", "reason": "dtype not on CUDA"},
        {"id": "matmul||fp32|forward|3", "status": "ok", "events": events},
    ]
    for name, rows in (("t.jsonl", traced), ("m.jsonl", measured)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = op_sweep.compare([tmp_path / "m.jsonl"], [tmp_path / "t.jsonl"], tmp_path / "out")
    assert got["cases"] == {
        "matmul||bf16|forward|3": {"verdict": "not sampled", "detail": "gpu: dtype not on CUDA"},
        "matmul||fp32|forward|3": {
            "verdict": "matched",
            "detail": "",
            "peak_gpu": 2048,
            "peak_traced": 2048,
        },
    }


def test_moved_keeps_the_tensors_an_op_wants_on_the_cpu():
    x, sections = torch.randn(4, 6, requires_grad=True), torch.tensor([1, 3])
    got = cases.moved(SampleInput(x, args=(sections,)), lambda t: t.to("meta"), [False, True])
    assert got.input.device.type == "meta" and got.input.requires_grad and got.input.is_leaf
    assert got.args[0].device.type == "cpu"


def test_a_full_reduction_splits_across_blocks_and_frees_last_first():
    """H100, torch 2.11: ``std`` of 512,000 float32 elements allocates its output, then 63
    blocks' Welford records (16 bytes each) and 4 bytes of semaphores, freed semaphores first."""
    x = torch.randn(512_000)
    got = trace_case(_Op(torch.std), SampleInput(x), "forward")
    assert tokens(got["events"]) == [
        ("+", 4),
        ("+", 1008),
        ("+", 4),
        ("-", 4),
        ("-", 1008),
        ("-", 4),
    ]


def test_an_op_cuda_runs_as_its_composite_allocates_its_pieces():
    """H100, torch 2.11: ``isinf`` has no CUDA kernel; its composite takes ``abs`` of the input
    (409,600 float32 elements) before the boolean output, and frees it after."""
    x = torch.randn(409_600)
    got = trace_case(_Op(torch.isinf), SampleInput(x), "forward")
    assert tokens(got["events"]) == [
        ("+", 1_638_400),
        ("+", 409_600),
        ("-", 1_638_400),
        ("-", 409_600),
    ]


def test_backward_formulas_write_into_their_fresh_tensors_in_place():
    """H100, torch 2.11: ``max(dim)``'s backward scatters into the zeros it made and
    ``trace``'s fills their diagonal, in place (a dispatch mode would see out-of-place ops): one
    input-sized gradient each, no second one."""
    n = 160 * 3200 * 4
    x = torch.randn(160, 3200, requires_grad=True)
    got = trace_case(_Op(lambda t: torch.max(t, 1)), SampleInput(x), "backward")
    assert _allocs(got["events"]).count(n) == 1
    got = trace_case(_Op(torch.trace), SampleInput(x), "backward")
    assert _allocs(got["events"]).count(n) == 1


def test_renorm_frees_its_scratch_as_scopes_end():
    """H100, torch 2.11, (160, 160, 160) bf16 over the last dim: the output, the norms, the
    norm's split-reduction scratch (freed when the norm is made), the scale factors, then the
    factors and the norms freed."""
    x = torch.randn(160, 160, 160, dtype=torch.bfloat16)
    got = trace_case(_Op(torch.renorm), SampleInput(x, args=(2, -1, 0.5)), "forward")
    assert tokens(got["events"]) == [
        ("+", 8_192_000),
        ("+", 640),
        ("+", 32_768_000),
        ("+", 8),
        ("-", 8),
        ("-", 32_768_000),
        ("+", 320),
        ("-", 320),
        ("-", 640),
        ("-", 8_192_000),
    ]


def test_logsumexp_allocates_its_composites_pieces():
    """H100, torch 2.11, ``logsumexp`` of (640, 640) float32 over dim 1: the maxima, their
    ``abs`` and its infinity mask (freed), the shifted input, then the output."""
    x = torch.randn(640, 640)
    got = trace_case(_Op(torch.logsumexp), SampleInput(x, args=(1,)), "forward")
    assert tokens(got["events"]) == [
        ("+", 2560),
        ("+", 2560),
        ("+", 640),
        ("-", 640),
        ("-", 2560),
        ("+", 1_638_400),
        ("+", 2560),
        ("-", 1_638_400),
        ("-", 2560),
        ("-", 2560),
    ]


def test_count_nonzero_sums_its_mask_through_an_int64_copy():
    """H100, torch 2.11, 15 float32 elements: the ``!= 0`` mask, the 8-byte count, then the
    sum's int64 copy of the mask."""
    got = trace_case(_Op(torch.count_nonzero), SampleInput(torch.randn(15)), "forward")
    assert _allocs(got["events"]) == [15, 8, 120]
