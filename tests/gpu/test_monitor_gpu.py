"""On a real GPU: ``memfit watch --once --json`` and the exporter see a training process, with
its published allocator stats consistent with NVML, and nothing is left behind at exit."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from memfit.cli import main
from memfit.monitor import Monitor, start_exporter

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]

TRAIN = """
import os, sys, time, torch
from transformers import GPT2Config, GPT2LMHeadModel
stop = sys.argv[1]
{publish}
model = GPT2LMHeadModel(GPT2Config(n_layer=4)).cuda()
opt = torch.optim.AdamW(model.parameters())
ids = torch.randint(0, 50257, (4, 256), device="cuda")
steps = 0
end = time.time() + 300
while not os.path.exists(stop) and time.time() < end:
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    steps += 1
    {step}
    if steps == 5:
        print("ready", flush=True)
"""


def _start(
    tmp_path: Path, argv_prefix: list[str], publish: bool, runtime: Path | None = None
) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "train_gpt2.py"
    script.write_text(
        textwrap.dedent(TRAIN).format(
            publish="import memfit; pub = memfit.publish(interval=0.2)" if publish else "",
            step="pub.step()" if publish else "",
        )
    )
    stop = tmp_path / "stop"
    env = dict(os.environ, MEMFIT_RUNTIME_DIR=str(runtime or tmp_path / "rt"))
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["MEMFIT_PUBLISH_INTERVAL"] = "0.2"
    proc = subprocess.Popen(
        [*argv_prefix, sys.executable, str(script), str(stop)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # a few publications
    return proc, stop


def _ours(doc: dict, name: str) -> tuple[dict, dict]:
    for dev in doc["devices"]:
        for proc in dev["processes"]:
            if proc["command"] and name in proc["command"] and "memfit run" not in proc["command"]:
                return dev, proc
    raise AssertionError(f"no process running {name} in {json.dumps(doc)[:2000]}")


def _check_consistent(dev: dict, proc: dict) -> None:
    torch_stats = proc["torch"]
    assert torch_stats is not None, proc
    assert proc["cuda_initialised"] is True
    assert proc["used_memory"] > 0
    assert 0 < torch_stats["allocated"] <= torch_stats["reserved"] <= proc["used_memory"]
    assert torch_stats["max_allocated"] >= torch_stats["allocated"]
    # the CUDA context and libraries: hundreds of MiB on an H200, never negative
    assert proc["non_torch"] == proc["used_memory"] - torch_stats["reserved"] > 0
    assert dev["memory_used"] >= proc["used_memory"]
    assert proc["user"] is not None


def _scrape_exporter() -> str:
    """One scrape of an exporter over this machine's GPUs."""
    with Monitor() as monitor:
        exporter = start_exporter(monitor, "127.0.0.1", 0, interval=0.5)
        try:
            return str(urllib.request.urlopen(exporter.url, timeout=10).read().decode())
        finally:
            exporter.stop()


def _watch_json(monkeypatch, capsys, runtime: Path) -> dict:
    monkeypatch.setenv("MEMFIT_RUNTIME_DIR", str(runtime))
    capsys.readouterr()
    assert main(["watch", "--once", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_watch_and_export_see_a_publishing_training_process(tmp_path, monkeypatch, capsys):
    proc, stop = _start(tmp_path, [], publish=True)
    runtime = tmp_path / "rt"
    try:
        dev, ours = _ours(
            _watch_json(monkeypatch, capsys, runtime), str(tmp_path / "train_gpt2.py")
        )
        assert ours["pid"] == proc.pid
        _check_consistent(dev, ours)
        assert ours["torch"]["step"] >= 5
        text = _scrape_exporter()
        for metric in (
            "memfit_process_gpu_memory_bytes",
            "memfit_torch_allocated_bytes",
            "memfit_torch_reserved_bytes",
            "memfit_process_non_torch_bytes",
        ):
            assert re.search(rf'^{metric}{{[^}}]*pid="{proc.pid}"[^}}]*}} \d', text, re.M), metric
        assert re.search(r'^memfit_gpu_memory_used_bytes\{gpu="0"', text, re.M)
    finally:
        stop.touch()
        assert proc.wait(timeout=120) == 0
    assert list(runtime.iterdir()) == []  # the publisher removed its file at exit


def test_memfit_run_publishes_without_a_change_to_the_script(tmp_path, monkeypatch, capsys):
    run = [sys.executable, "-m", "memfit", "run", "--no-history", "--oom-dir", str(tmp_path)]
    proc, stop = _start(tmp_path, [*run, "--"], publish=False)
    runtime = tmp_path / "rt"
    try:
        dev, ours = _ours(
            _watch_json(monkeypatch, capsys, runtime), str(tmp_path / "train_gpt2.py")
        )
        if ours["torch"] is None:  # say what the child published, if anything
            files = {f.name: f.read_text()[:1500] for f in runtime.glob("*")}
            raise AssertionError(f"no torch stats for {ours}; runtime dir: {files}")
        _check_consistent(dev, ours)
        assert ours["torch"]["step"] is None  # the script does not count steps
    finally:
        stop.touch()
        assert proc.wait(timeout=120) == 0
    assert list(runtime.iterdir()) == []


def test_two_processes_on_one_gpu_each_with_its_framework_numbers(tmp_path, monkeypatch, capsys):
    """Two training processes on one GPU: watch, the exporter and doctor tell them apart, each
    with torch's numbers in the frameworks' schema."""
    run = [sys.executable, "-m", "memfit", "run", "--no-history", "--oom-dir", str(tmp_path)]
    first, stop = _start(tmp_path, [], publish=True)
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    runtime = tmp_path / "rt"
    second, stop2 = _start(second_dir, [*run, "--"], publish=False, runtime=runtime)
    try:
        doc = _watch_json(monkeypatch, capsys, runtime)
        rows = {}
        for dev in doc["devices"]:
            for p in dev["processes"]:
                if p["pid"] in (first.pid,) or (p["command"] and "second" in p["command"]):
                    rows[p["pid"]] = p
        assert len(rows) == 2, json.dumps(doc)[:3000]
        for p in rows.values():
            (fw,) = p["frameworks"]
            assert fw["framework"] == "torch" and fw["kind"] == "gpu"
            # read a moment apart from the torch stats in a training process: allocated moves,
            # the pool (reserved, warmed up) does not
            assert 0 < fw["in_use"] <= fw["pool"] == p["torch"]["reserved"]
            assert p["outside_pool"] == p["non_torch"] > 0
        text = _scrape_exporter()
        for pid in rows:
            # labels come in alphabetical order: framework before pid
            pattern = rf'^memfit_framework_in_use_bytes{{[^}}]*framework="torch"[^}}]*pid="{pid}"'
            assert re.search(pattern, text, re.M), pid
        capsys.readouterr()
        assert main(["doctor", "--json"]) in (0, 1)
        found = json.loads(capsys.readouterr().out)
        published = {p["pid"]: p for p in found["processes"] if p["source"] == "published"}
        assert set(rows) <= set(published)
        for pid in rows:
            assert published[pid]["started"] == ["torch"]
            assert published[pid]["gpus"] == [0]
    finally:
        stop.touch()
        stop2.touch()
        assert first.wait(timeout=120) == 0
        assert second.wait(timeout=120) == 0
