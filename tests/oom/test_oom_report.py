"""The report: ranking of the fixes, the Markdown and JSON, on synthetic and real traces."""

from __future__ import annotations

import json
import shutil

import pytest
from oom_data import (
    TRACES,
    GiB,
    MiB,
    facts,
    finalize_reports,
    model,
    write_facts,
    write_report,
)

import memfit.snapshot
from memfit import InvalidInputError, oom_report
from memfit.oom import _observer, rank_fixes, read_incident


def _ranked(tmp_path, **kw):
    incident = read_incident(write_facts(tmp_path, facts(**kw)))
    return rank_fixes(incident)


def test_fixes_are_ranked_by_expected_saving(tmp_path):
    # 60 GiB allocated, of which 16 GiB parameters, gradients and AdamW state: 44 GiB working set
    fixes, notes = _ranked(tmp_path, model=model())
    names = [f.name for f in fixes]
    assert names == [
        "Activation checkpointing",
        "Micro-batch 2x smaller, gradients accumulated over 2 steps",
        "Mixed precision (bf16)",
        "Allocator setting expandable_segments:True",
    ]
    savings = [f.saving for f in fixes]
    assert savings == [
        int(0.6 * 44 * GiB),
        22 * GiB,
        int(0.3 * 44 * GiB) - 2 * GiB,  # less the bf16 copies of the 4 GiB of fp32 weights
        2 * GiB,  # reserved - allocated, an upper bound without a trace
    ]
    assert all(f.covers for f in fixes)  # the shortfall is 1 GiB
    assert "model.gradient_checkpointing_enable" in fixes[0].how[0][1]  # a Hugging Face model
    assert fixes[1].how[1] == (
        "Hugging Face Trainer",
        "--per_device_train_batch_size B/2 --gradient_accumulation_steps 2",
    )
    assert fixes[3].how[0] == (
        "",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py --batch-size 64",
    )
    assert "upper bound" in fixes[3].basis
    assert notes == []


def test_the_micro_batch_is_split_until_it_covers_the_shortfall(tmp_path):
    fixes, _ = _ranked(tmp_path, model=model(), alloc=40 * GiB, available=0)
    micro = next(f for f in fixes if f.name.startswith("Micro-batch"))
    assert micro.name.startswith("Micro-batch 16x smaller")
    assert micro.saving == 44 * GiB * 15 // 16 and micro.covers
    assert not next(f for f in fixes if f.name == "Activation checkpointing").covers


def test_nothing_covers_a_huge_shortfall(tmp_path):
    fixes, notes = _ranked(tmp_path, model=model(), alloc=400 * GiB, available=0)
    assert not any(f.covers for f in fixes)
    assert any("No single fix covers" in n for n in notes)


def test_in_the_optimizer_step_only_the_optimizer_helps(tmp_path):
    fixes, notes = _ranked(tmp_path, model=model(), phase="optimizer step", reserved=60 * GiB)
    assert [f.name for f in fixes] == ["Fused AdamW step"]
    assert fixes[0].saving == 4 * GiB
    assert "fused=True" in fixes[0].how[0][1]
    assert "after the activations were freed" in notes[0]


def test_inference_gets_a_smaller_batch_not_checkpointing(tmp_path):
    fixes, _ = _ranked(tmp_path, model=model(grads=0, state=0), grad_enabled=False)
    names = [f.name for f in fixes]
    assert "Activation checkpointing" not in names
    assert "Batch 2x smaller" in names
    mixed = next(f for f in fixes if f.name.startswith("Mixed"))
    assert mixed.saving == 2 * GiB + int(0.3 * 56 * GiB)


def test_what_is_already_on_is_not_proposed(tmp_path):
    bf16 = model(checkpointing=True, dtypes={"bfloat16": 4 * GiB})
    fixes, notes = _ranked(tmp_path, model=bf16, expandable=True, autocast=None)
    assert [f.name for f in fixes] == ["Micro-batch 2x smaller, gradients accumulated over 2 steps"]
    assert "Expandable segments are already on." in notes
    assert "Activation checkpointing is already on." in notes
    fixes, notes = _ranked(tmp_path, model=model(), autocast=True)
    assert not any(f.name.startswith("Mixed") for f in fixes)
    assert any("autocast" in n for n in notes)


def test_without_a_model_the_savings_are_not_estimated(tmp_path):
    fixes, _ = _ranked(tmp_path, model=None)
    assert fixes[0].name == "Allocator setting expandable_segments:True"
    assert [f.saving for f in fixes[1:]] == [None, None, None]
    assert all("not estimated" in f.basis for f in fixes[1:])
    assert all(f.covers is None for f in fixes[1:])


def test_the_report_of_an_error_caught_by_the_observer(tmp_path, probe, capsys):
    with oom_report(tmp_path) as hook:
        _observer.on_oom(0, 2 * GiB, 80 * GiB, 1 * GiB)
    assert len(hook.reports) == 1
    files = hook.reports[0]
    text = files.report.read_text()
    assert text.startswith("# CUDA out of memory: tried to allocate 2.00 GiB on cuda:0")
    assert "**1.00 GiB short**" in text
    assert "(for a block of 512.00 MiB)" in text
    assert "test_the_report_of_an_error_caught_by_the_observer" in text
    assert "| reserved but unallocated | 10.00 GiB |" in text
    assert "| outside PyTorch, this process | 1.00 GiB |" in text
    assert "`/home/u/model.py:42 forward`" in text  # the allocation site at the peak
    assert "## Fixes, by expected saving" in text
    data = json.loads(files.json.read_text())
    assert data["status"] == "complete" and data["units"] == "bytes"
    assert data["files"] == {
        "json": files.json.name,
        "snapshot": files.snapshot.name,
        "report": files.report.name,
    }
    assert data["analysis"]["events"] > 0
    assert data["fixes"][0]["saving"] == max(f["saving"] or 0 for f in data["fixes"])
    assert "report written to" in capsys.readouterr().err


def test_a_rank_of_a_distributed_job_is_named(tmp_path, probe, monkeypatch):
    """torchrun's variables, before (or without) a process group: the report says the rank."""
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with oom_report(tmp_path) as hook:
        _observer.on_oom(0, 2 * GiB, 80 * GiB, 1 * GiB)
    (files,) = hook.reports
    assert " · rank 3 of 8 (local rank 1) · pid " in files.report.read_text()
    data = json.loads(files.json.read_text())
    assert data["distributed"] == {"rank": 3, "world_size": 8, "local_rank": 1, "backend": None}


def test_a_single_process_job_names_no_rank(tmp_path, probe, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    with oom_report(tmp_path) as hook:
        _observer.on_oom(0, 2 * GiB, 80 * GiB, 1 * GiB)
    (files,) = hook.reports
    assert " rank " not in files.report.read_text().split("\n\n")[1]
    assert json.loads(files.json.read_text())["distributed"] is None


def test_reports_are_written_at_exit(tmp_path, probe, no_hooks_left):
    hook = oom_report(tmp_path)
    _observer.on_oom(0, GiB, 80 * GiB, 0)
    assert not list(tmp_path.glob("*.md"))
    (handler,) = no_hooks_left.handlers
    handler()
    assert len(list(tmp_path.glob("*.md"))) == 1
    assert hook.closed


def test_the_report_on_a_real_h200_trace(tmp_path):
    trace = TRACES / "trace-bert-base-fp32-b32-s512.pickle.gz"
    shutil.copy(trace, tmp_path / "oom-x.pickle.gz")
    path = write_facts(tmp_path, facts(snapshot="oom-x.pickle.gz", model=model()))
    files = write_report(path)
    expected = memfit.snapshot.report(memfit.snapshot.load(trace))
    data = json.loads(path.read_text())
    assert data["analysis"]["peak_reserved"] == expected.peak_reserved
    assert data["analysis"]["events"] == expected.events
    allocator = next(f for f in data["fixes"] if f["name"].startswith("Allocator"))
    expandable = next(w for w in expected.what_if if w.label == "expandable_segments:True")
    assert allocator["name"] == "Allocator setting expandable_segments:True"
    assert allocator["saving"] == expandable.saved  # measured by the replay
    assert allocator["basis"].startswith("replay of the recorded trace")
    text = files.report.read_text()
    assert f"{expected.events:,} allocator events" in text
    assert "| expandable_segments:True |" in text
    assert "no stack frames recorded" in text.lower()


def test_a_trace_no_setting_improves(tmp_path):
    trace = TRACES / "trace-roberta-base-fp32-b32-s512-expandable.pickle.gz"
    shutil.copy(trace, tmp_path / "oom-x.pickle.gz")
    data = facts(snapshot="oom-x.pickle.gz", model=model(), expandable=True)
    write_report(write_facts(tmp_path, data))
    done = json.loads((tmp_path / "oom-x.json").read_text())
    assert not any(f["name"].startswith("Allocator") for f in done["fixes"])
    assert any(n.startswith("No allocator setting lowers") for n in done["notes"])


def test_writing_twice_changes_nothing(tmp_path):
    path = write_facts(tmp_path, facts(model=model()))
    first = write_report(path)
    stamp = (first.report.stat().st_mtime_ns, path.stat().st_mtime_ns)
    assert finalize_reports(tmp_path) == [first]
    assert (first.report.stat().st_mtime_ns, path.stat().st_mtime_ns) == stamp


def test_facts_files_that_are_not_ours(tmp_path):
    empty = tmp_path / "oom-empty.json"
    empty.write_text("")
    with pytest.raises(InvalidInputError, match="empty or cut short"):
        write_report(empty)
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    with pytest.raises(InvalidInputError, match="not an out-of-memory facts file"):
        write_report(other)
    with pytest.raises(InvalidInputError, match="cannot be read"):
        write_report(tmp_path / "missing.json")
    assert finalize_reports(tmp_path) == []  # the empty one is skipped


def test_a_snapshot_that_cannot_be_read_still_gives_a_report(tmp_path):
    (tmp_path / "oom-x.pickle").write_bytes(b"not a pickle")
    path = write_facts(tmp_path, facts(snapshot="oom-x.pickle", model=model()))
    files = write_report(path)
    assert "The snapshot could not be analysed" in files.report.read_text()
    assert json.loads(path.read_text())["fixes"]


def test_sizes_are_bytes_inside_and_binary_units_in_the_text(tmp_path):
    path = write_facts(tmp_path, facts(alloc=3 * GiB + 512 * MiB, model=model()))
    text = write_report(path).report.read_text()
    assert "tried to allocate 3.50 GiB" in text
    assert "GiB = 2^30 bytes" in text
    assert json.loads(path.read_text())["failure"]["alloc_size"] == 3 * GiB + 512 * MiB
