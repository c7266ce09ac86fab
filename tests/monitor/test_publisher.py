"""The publisher: its file, its directory, and nothing left behind (CPU: CUDA never starts)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import memfit
from memfit.monitor import LinuxProcs, Publisher, RuntimeDir
from memfit.monitor._publisher import SCHEMA, prepare_runtime_dir, runtime_dir, start_ticks


def test_the_runtime_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMFIT_RUNTIME_DIR", str(tmp_path / "x"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "xdg"))
    assert runtime_dir() == str(tmp_path / "x")
    monkeypatch.delenv("MEMFIT_RUNTIME_DIR")
    assert runtime_dir() == str(tmp_path / "xdg" / "memfit")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert runtime_dir() == f"/tmp/memfit-{os.getuid()}"


def test_the_directory_is_private(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    prepare_runtime_dir(str(loose))
    assert stat.S_IMODE(loose.stat().st_mode) == 0o700
    fresh = tmp_path / "a" / "b"
    prepare_runtime_dir(str(fresh))
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700


def test_a_publisher_writes_its_stats_and_removes_them(tmp_path):
    with Publisher(interval=0.05, directory=str(tmp_path)) as pub:
        pub.step()
        pub.step(2)
        deadline = time.time() + 5
        while pub.writes < 2 and time.time() < deadline:
            time.sleep(0.01)
        doc = json.loads((tmp_path / f"{os.getpid()}.json").read_text())
        assert stat.S_IMODE((tmp_path / f"{os.getpid()}.json").stat().st_mode) == 0o600
    assert doc["schema"] == SCHEMA
    assert doc["pid"] == os.getpid()
    assert doc["start_ticks"] == start_ticks(os.getpid())
    assert doc["step"] == 3
    assert doc["torch"] == torch.__version__
    # on this CPU machine CUDA is never initialised, by the program or by the publisher
    assert doc["cuda_initialised"] is False and doc["devices"] == []
    assert not torch.cuda.is_initialized()
    assert list(tmp_path.iterdir()) == []
    assert not pub.running


def test_with_the_framework_reader_the_settings_and_rows_are_published(tmp_path, monkeypatch):
    from memfit.monitor import _framework_numbers as numbers

    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    pub = Publisher(interval=1.0, directory=str(tmp_path), frameworks=numbers)
    doc = pub.payload()
    assert doc is not None
    assert doc["frameworks"] == []  # torch is imported, CUDA never started
    assert doc["settings"]["environment"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert doc["settings"]["torch"] == {"started": False}
    assert Publisher(interval=1.0, directory=str(tmp_path)).payload()["settings"] is None
    # waiting for a GPU: no framework has started one
    waiting = Publisher(
        interval=1.0, directory=str(tmp_path), wait_for_cuda=True, frameworks=numbers
    )
    assert waiting.payload() is None


def test_the_reader_parses_framework_rows_and_matches_them_to_a_gpu():
    from memfit.monitor._published import published_from_json

    rows = [
        {
            "framework": "jax",
            "device": "gpu:0",
            "kind": "gpu",
            "index": None,
            "uuid": "GPU-a",
            "in_use": 1,
            "peak": 2,
            "pool": 3,
            "limit": 4,
        },
        {
            "framework": "jax",
            "device": "gpu:1",
            "kind": "gpu",
            "index": 3,
            "uuid": None,
            "in_use": 5,
            "peak": 6,
            "pool": None,
            "limit": None,
        },
        {
            "framework": "jax",
            "device": "cpu:0",
            "kind": "cpu",
            "index": None,
            "uuid": None,
            "in_use": None,
            "peak": None,
            "pool": None,
            "limit": None,
        },
        {"not": "a row"},
    ]
    doc = {"schema": SCHEMA, "pid": 1, "time": 0.0, "frameworks": rows, "settings": {"x": 1}}
    pub = published_from_json(doc)
    assert pub is not None and len(pub.frameworks) == 3 and pub.settings == {"x": 1}
    assert [r.in_use for r in pub.framework_stats("GPU-a", 7)] == [1]
    assert [r.in_use for r in pub.framework_stats(None, 3)] == [5]
    assert pub.framework_stats("GPU-b", 0) == ()


def test_publish_now_beside_the_thread_never_leaves_half_a_file(tmp_path):
    """A caller's publish_now and the thread's write one at a time: they share the temporary
    file, and two writers at once left JSON with extra data (seen in CI)."""
    with Publisher(interval=0.0005, directory=str(tmp_path)) as pub:
        path = tmp_path / f"{os.getpid()}.json"
        for _ in range(300):
            assert pub.publish_now()
            assert json.loads(path.read_text())["pid"] == os.getpid()


def test_waiting_for_cuda_writes_nothing(tmp_path):
    pub = Publisher(interval=1.0, directory=str(tmp_path), wait_for_cuda=True)
    assert pub.payload() is None
    assert pub.publish_now() is False
    assert list(tmp_path.iterdir()) == []


def test_publish_returns_the_running_publisher_and_checks_its_interval(tmp_path):
    with pytest.raises(memfit.InvalidInputError, match="interval=0"):
        memfit.publish(interval=0)
    first = memfit.publish(interval=5.0, directory=str(tmp_path))
    try:
        again = memfit.publish(interval=2.0, directory=str(tmp_path))
        assert again is first and again.interval == 2.0 and again.running
    finally:
        first.stop()
    assert list(tmp_path.iterdir()) == []


def _child(tmp_path, body: str) -> subprocess.Popen[str]:
    script = textwrap.dedent(
        f"""
        import sys, time, memfit
        pub = memfit.publish(interval=0.05, directory={str(tmp_path)!r})
        while pub.writes == 0:
            time.sleep(0.01)
        print("published", flush=True)
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)


def test_nothing_is_left_behind_when_the_process_ends(tmp_path):
    child = _child(tmp_path, "sys.exit(0)")
    assert child.stdout.readline().strip() == "published"
    assert child.wait(timeout=60) == 0
    assert list(tmp_path.iterdir()) == []


def test_a_killed_process_file_is_removed_by_the_reader(tmp_path):
    child = _child(tmp_path, "time.sleep(60)")
    assert child.stdout.readline().strip() == "published"
    source = RuntimeDir(tmp_path, LinuxProcs())
    found = source.read()
    assert list(found) == [child.pid] and found[child.pid].cuda_initialised is False
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    assert (tmp_path / f"{child.pid}.json").exists()  # SIGKILL: the process could not clean
    assert source.read() == {}
    assert list(tmp_path.iterdir()) == []


def test_a_reused_pid_does_not_inherit_stats(tmp_path):
    pub = Publisher(directory=str(tmp_path))
    prepare_runtime_dir(str(tmp_path))
    assert pub.publish_now()
    path = tmp_path / f"{os.getpid()}.json"
    assert list(RuntimeDir(tmp_path, LinuxProcs()).read()) == [os.getpid()]
    doc = json.loads(path.read_text())
    doc["start_ticks"] -= 1  # written by an earlier process with the same pid
    path.write_text(json.dumps(doc))
    assert RuntimeDir(tmp_path, LinuxProcs()).read() == {}
    assert not path.exists()


def test_foreign_files_are_ignored(tmp_path):
    (tmp_path / "1.json").write_text("{not json")
    (tmp_path / "2.json").write_text(json.dumps({"schema": "other/1", "pid": 2}))
    assert RuntimeDir(tmp_path, LinuxProcs()).read() == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.json", "2.json"]
