"""The observer, called directly with fake arguments: what it saves, and that it never raises."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from oom_data import BrokenProbe, FakeProbe, GiB, MiB
from torch._subclasses import FakeTensorMode

import memfit.snapshot
from memfit import InvalidInputError, oom_report
from memfit.oom import _observer, read_incident


def _one(directory: Path, suffix: str) -> Path:
    files = sorted(directory.glob(f"oom-*{suffix}"))
    assert len(files) == 1, files
    return files[0]


def test_the_observer_saves_the_snapshot_and_the_facts(tmp_path, probe):
    directory = tmp_path / "not" / "there"
    hook = oom_report(directory)
    assert directory.is_dir()

    _observer.on_oom(0, 2 * GiB, 80 * GiB, 1 * GiB)

    facts_path = _one(directory, ".json")
    snapshot = _one(directory, ".pickle")
    assert facts_path.stem == snapshot.stem
    assert f"-pid{os.getpid()}" in facts_path.stem
    facts = json.loads(facts_path.read_text())
    assert facts["status"] == "pending"
    failure = facts["failure"]
    assert failure["alloc_size"] == 2 * GiB
    assert failure["block_size"] == 512 * MiB  # from the trace's oom entry
    assert failure["shortfall"] == 1 * GiB
    assert failure["fraction_limited"] is False
    # the stack of the call that failed, innermost first, without the observer's own frames
    assert failure["stack"][0]["name"] == "test_the_observer_saves_the_snapshot_and_the_facts"
    assert failure["recorded_frames"][1] == {
        "filename": "/home/u/model.py",
        "line": 42,
        "name": "forward",
    }
    memory = facts["memory"]
    assert (memory["allocated"], memory["reserved"]) == (60 * GiB, 70 * GiB)
    assert memory["nvml_process"] == 71 * GiB
    assert memory["largest_free_block"] > 0
    assert facts["history"]["recorded"] is True
    # the saved snapshot is torch's (device_free kept) and memfit.snapshot reads it
    snap = memfit.snapshot.load(snapshot)
    assert len(snap.trace.action) > 0
    report = memfit.snapshot.report(snap, what_if=False)
    assert report.ooms and report.ooms[0].size == 512 * MiB
    assert hook.pending == [facts_path]


def test_facts_without_history_and_with_a_memory_fraction(tmp_path, monkeypatch):
    snap = {"segments": [], "device_traces": [[]], "allocator_settings": {}}
    monkeypatch.setattr(_observer, "PROBE", FakeProbe(snap))
    oom_report(tmp_path, record_history=False)
    _observer.on_oom(0, 3 * GiB, 40 * GiB, 20 * GiB)
    facts = json.loads(_one(tmp_path, ".json").read_text())
    # under a 40 GiB limit with 70 GiB reserved nothing is available, whatever the device says
    assert facts["failure"]["fraction_limited"] is True
    assert facts["failure"]["available"] == 0
    assert facts["failure"]["shortfall"] == 3 * GiB
    assert facts["history"]["recorded"] is False


def test_the_observer_never_raises(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_observer, "PROBE", BrokenProbe())
    oom_report(tmp_path)
    assert _observer.on_oom(0, GiB, 80 * GiB, 0) is None
    facts = json.loads(_one(tmp_path, ".json").read_text())
    assert not list(tmp_path.glob("*.pickle"))
    assert any("snapshot failed" in e for e in facts["errors"])
    assert any("illegal memory access" in e for e in facts["errors"])
    assert "CUDA out of memory on cuda:0" in capsys.readouterr().err


def test_an_error_inside_the_observer_is_logged_not_raised(tmp_path, probe, monkeypatch, capsys):
    oom_report(tmp_path)

    def boom(*args: object) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(_observer, "claim_stem", boom)
    _observer.on_oom(0, GiB, 80 * GiB, 0)
    assert "disk full" in capsys.readouterr().err


def test_names_never_collide(tmp_path):
    when = datetime.datetime(2026, 11, 30, 12, 0, 0)
    (tmp_path / "oom-20261130-120000-pid7.md").write_text("someone else's")
    stems = [_observer.claim_stem(str(tmp_path), when, 7) for _ in range(3)]
    assert stems == [
        "oom-20261130-120000-pid7-2",
        "oom-20261130-120000-pid7-3",
        "oom-20261130-120000-pid7-4",
    ]
    assert (tmp_path / "oom-20261130-120000-pid7.md").read_text() == "someone else's"


def test_two_errors_in_one_second_get_their_own_files(tmp_path, probe):
    oom_report(tmp_path)
    for _ in range(2):
        _observer.on_oom(0, GiB, 80 * GiB, 0)
    assert len(list(tmp_path.glob("oom-*.json"))) == 2
    assert len(list(tmp_path.glob("oom-*.pickle"))) == 2


def test_at_most_max_reports(tmp_path, probe, capsys):
    oom_report(tmp_path, max_reports=2)
    for _ in range(4):
        _observer.on_oom(0, GiB, 80 * GiB, 0)
    assert len(list(tmp_path.glob("oom-*.json"))) == 2
    assert probe.snapshots == 2
    assert "not saving more than 2 reports" in capsys.readouterr().err


def test_a_closed_hook_saves_nothing(tmp_path, probe):
    hook = oom_report(tmp_path)
    hook.close()
    _observer.on_oom(0, GiB, 80 * GiB, 0)
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(
    torch.version.cuda is None, reason="fake CUDA tensors need a CUDA build of torch"
)
def test_the_model_and_optimizer_are_found_in_the_frames(tmp_path, probe):
    oom_report(tmp_path)
    with FakeTensorMode():  # fake CUDA tensors: no GPU needed
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 1024, device="cuda"), torch.nn.Linear(1024, 1024, device="cuda")
        )
        optimizer = torch.optim.AdamW(model.parameters())
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
            optimizer.state[p] = {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}

    def training_step() -> None:
        _observer.on_oom(0, GiB, 80 * GiB, 0)

    training_step()
    facts = json.loads(_one(tmp_path, ".json").read_text())
    found = facts["model"]
    size = 2 * (1024 * 1024 + 1024) * 4
    assert found["name"] == "Sequential"
    assert found["parameter_bytes"] == size
    assert found["gradient_bytes"] == size
    assert found["optimizer_state_bytes"] == 2 * size
    assert found["optimizer"] == "AdamW"
    assert found["dtypes"] == {"float32": size}
    assert read_incident(_one(tmp_path, ".json")).activations == 60 * GiB - 4 * size


def test_directories_that_cannot_be_used(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InvalidInputError, match="cannot be created"):
        oom_report(blocker / "oom")
    with pytest.raises(InvalidInputError, match="max_reports=0"):
        oom_report(tmp_path, max_reports=0)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(InvalidInputError, match="Files cannot be created"):
        oom_report(locked)


def test_installing_never_initialises_cuda(tmp_path):
    code = (
        "import json, sys, torch\n"
        "import memfit.oom\n"
        "from memfit.oom import _observer\n"
        "hook = memfit.oom_report(sys.argv[1])\n"
        "assert not torch.cuda.is_initialized(), 'CUDA was initialised'\n"
        "print(json.dumps(_observer.state()))\n"
        "hook.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    state = json.loads(out.stdout)
    assert state["queued"] is True  # waits for the program's own CUDA initialisation
    assert state["attached"] is False
    assert state["directories"] == [str(tmp_path.resolve())]


def test_an_allocation_by_another_thread_records_the_main_threads_stack(tmp_path, probe):
    # in a backward pass, autograd's device thread allocates: it has no Python frames, and the
    # main thread waits in loss.backward()
    oom_report(tmp_path)
    worker = threading.Thread(target=_observer.on_oom, args=(0, GiB, 80 * GiB, 0), name="w")
    worker.start()
    worker.join()
    failure = json.loads(_one(tmp_path, ".json").read_text())["failure"]
    assert failure["in_main_thread"] is False
    assert failure["thread"] == "w"
    assert failure["grad_enabled"] is None and failure["autocast"] is None
    assert failure["phase"] == "another thread"
    names = [f["name"] for f in failure["main_stack"]]
    assert "test_an_allocation_by_another_thread_records_the_main_threads_stack" in names
