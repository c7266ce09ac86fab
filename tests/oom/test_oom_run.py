"""``memfit run``: the child gets the report without any change to its script (no CUDA here)."""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import textwrap

import pytest
from oom_data import oom_snapshot, run_with_report
from rich.console import Console

from memfit import InvalidInputError
from memfit.cli._run_cmd import add_run_parser, run_run

PY = sys.executable


def _script(tmp_path, body: str, name: str = "train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="memfit")
    add_run_parser(parser.add_subparsers(dest="command"))
    return run_run(parser.parse_args(argv), Console())


def test_the_exit_code_passes_through_and_the_child_is_armed(tmp_path, capfd):
    script = _script(
        tmp_path,
        """
        import json, sys
        print("observer loaded:", "_memfit_oom_observer" in sys.modules)
        import torch
        import _memfit_oom_observer as observer
        print("state:", json.dumps(observer.state()))
        print("cuda initialised:", torch.cuda.is_initialized())
        sys.exit(3)
        """,
    )
    result = run_with_report([PY, str(script)], tmp_path / "oom")
    out = capfd.readouterr().out
    assert result.returncode == 3
    assert result.reports == ()
    assert "observer loaded: True" in out
    state = json.loads(out.split("state: ", 1)[1].splitlines()[0])
    assert state["directories"] == [str((tmp_path / "oom").resolve())]
    assert state["queued"] is True  # installed once torch was imported, waiting for CUDA
    assert state["watching_torch_import"] is False
    assert "cuda initialised: False" in out


def test_a_child_that_never_imports_torch_pays_for_one_small_import(tmp_path, capfd):
    script = _script(
        tmp_path,
        """
        import sys
        import _memfit_oom_observer as observer
        print("torch imported:", "torch" in sys.modules, observer.state()["watching_torch_import"])
        """,
    )
    assert run_with_report([PY, str(script)], tmp_path / "oom").returncode == 0
    assert "torch imported: False True" in capfd.readouterr().out


def test_an_existing_sitecustomize_still_runs(tmp_path, capfd):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("print('the user sitecustomize ran')\n")
    script = _script(tmp_path, "import sys; print('marker', '_memfit_oom_observer' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(mine))
    assert run_with_report([PY, str(script)], tmp_path / "oom", env=env).returncode == 0
    out = capfd.readouterr().out
    assert "the user sitecustomize ran" in out
    assert "marker True" in out


def test_an_oom_in_the_child_gets_its_report(tmp_path, capfd):
    snapshot = tmp_path / "fake-snapshot.pickle"
    snapshot.write_bytes(pickle.dumps(oom_snapshot()))
    script = _script(
        tmp_path,
        f"""
        import pickle, sys
        import torch  # installs the hook
        import _memfit_oom_observer as observer

        class Probe(observer.Probe):
            def memory_stats(self, device):
                return {{"allocated_bytes.all.current": 5 << 30,
                         "reserved_bytes.all.current": 6 << 30}}
            def snapshot(self):
                with open({str(snapshot)!r}, "rb") as fh:
                    return pickle.load(fh)
            def device(self, device):
                return {{"index": 0, "name": "Fake GPU", "total": 8 << 30, "uuid": None}}
            def nvml_process_memory(self, device):
                return None, "no NVML in this test"

        observer.PROBE = Probe()

        def forward():
            observer.on_oom(0, 2 << 30, 8 << 30, 1 << 30)  # what the allocator would call
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")

        forward()
        """,
    )
    code = _cli(["run", "--oom-dir", str(tmp_path / "oom"), "--", PY, str(script)])
    err = capfd.readouterr().err
    assert code == 1  # the child's: an uncaught exception
    assert "OutOfMemoryError" in err
    (report,) = (tmp_path / "oom").glob("oom-*.md")
    assert f"report: {report}" in err
    text = report.read_text()
    assert "tried to allocate 2.00 GiB on cuda:0" in text
    assert f"{script.name}:" in text and "in forward" in text
    assert "allocator events" in text  # the parent analysed the trace
    assert json.loads(report.with_suffix(".json").read_text())["status"] == "complete"


def test_json_output_and_a_signal(tmp_path, capfd):
    script = _script(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    code = _cli(["run", "--json", "--oom-dir", str(tmp_path / "oom"), "--", PY, str(script)])
    assert code == 128 + signal.SIGTERM
    data = json.loads(capfd.readouterr().out)
    assert data["exit_code"] == 128 + signal.SIGTERM
    assert data["reports"] == []


@pytest.mark.parametrize("argv", [["run"], ["run", "--"], ["run", "--no-history", "--"]])
def test_a_missing_command(argv):
    with pytest.raises(InvalidInputError, match="needs a command after '--'"):
        _cli(argv)


def test_a_command_that_does_not_exist(tmp_path):
    with pytest.raises(InvalidInputError, match="'no-such-program-xyz' was not found"):
        _cli(["run", "--oom-dir", str(tmp_path), "--", "no-such-program-xyz"])


def test_a_directory_that_cannot_be_created(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInputError, match="cannot be created: Not a directory"):
        _cli(["run", "--oom-dir", str(tmp_path / "file" / "oom"), "--", PY, "-c", "pass"])


def test_without_dash_dash_the_command_is_taken_as_is(tmp_path):
    assert _cli(["run", "--oom-dir", str(tmp_path), PY, "-c", "raise SystemExit(4)"]) == 4


def test_history_off_reaches_the_child(tmp_path, capfd):
    script = _script(tmp_path, "import os; print('history', os.environ['MEMFIT_OOM_HISTORY'])")
    assert _cli(["run", "--no-history", "--oom-dir", str(tmp_path), "--", PY, str(script)]) == 0
    assert "history 0" in capfd.readouterr().out


def test_memory_settings_reach_the_child_and_its_torch_limit_waits_for_cuda(tmp_path, capfd):
    script = _script(
        tmp_path,
        """
        import json, os, sys
        import _memfit_frameworks as knobs
        before = knobs.pending_imports()
        import torch
        queued = any("_torch_limit" in repr(c[0]) for c in torch.cuda._queued_calls)
        env = {k: os.environ.get(k) for k in ("TF_FORCE_GPU_ALLOW_GROWTH",
               "XLA_PYTHON_CLIENT_PREALLOCATE", "PYTORCH_CUDA_ALLOC_CONF")}
        print("child:", json.dumps({"before": before, "queued": queued, "env": env}))
        """,
    )
    argv = ["run", "--oom-dir", str(tmp_path / "oom"), "--limit", "0.25", "--growth"]
    argv += ["--allocator", "async", "--json", "--", PY, str(script)]
    assert _cli(argv) == 0
    out = capfd.readouterr().out
    child = json.loads(out.split("child: ", 1)[1].splitlines()[0])
    # torch's fraction waits for its import; TensorFlow's logical devices need a size, and with
    # no GPU here the share cannot become one (said in the actions)
    assert child["before"] == ["torch"]
    assert child["queued"] is True
    assert child["env"] == {
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
    }
    doc = json.loads(out[out.index("{\n") :])
    assert doc["exit_code"] == 0
    assert doc["memory"]["settings"]["limit_fraction"] == 0.25
    assert {a["framework"] for a in doc["memory"]["actions"]} == {"torch", "tensorflow", "jax"}
    unsupported = [a for a in doc["memory"]["actions"] if a["status"] == "unsupported"]
    assert [(a["framework"], a["setting"]) for a in unsupported] == [("tensorflow", "limit")]


def test_without_memory_settings_the_child_environment_is_untouched(tmp_path, capfd):
    script = _script(tmp_path, "import os; print('set:', 'MEMFIT_MEMORY' in os.environ)")
    assert _cli(["run", "--oom-dir", str(tmp_path / "oom"), "--", PY, str(script)]) == 0
    assert "set: False" in capfd.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--limit", "8"], r"limit='8' has no unit"),
        (["--limit=-1GiB"], r"below zero"),
        (["--growth", "--preallocate"], r"contradict each other"),
        (["--framework", "jax"], r"no memory setting was given"),
        (["--growth", "--framework", "mxnet"], r"framework='mxnet' is not one"),
        (["--allocator", "expandable", "--framework", "tf"], r"tensorflow cannot take"),
    ],
)
def test_bad_memory_settings_are_refused_before_the_command_runs(tmp_path, flags, message):
    marker = tmp_path / "ran"
    argv = ["run", "--oom-dir", str(tmp_path / "oom"), *flags, "--", "touch", str(marker)]
    with pytest.raises(InvalidInputError, match=message):
        _cli(argv)
    assert not marker.exists()
