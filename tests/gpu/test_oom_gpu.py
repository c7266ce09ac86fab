"""On a real GPU: a forced out-of-memory error gets its snapshot and report, in process and
through ``memfit run``. Each program runs in its own process, as a user's would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import memfit.snapshot
from memfit.oom import run_with_report
from memfit.report import oom_markdown

pytestmark = pytest.mark.gpu

# A training step of an 8-layer MLP (fp32, AdamW) under a 2 GiB memory fraction: 512 MiB of
# weights, 256 MiB of input and 256 MiB per layer output, so the fifth layer's output fails.
STEP = """
import json, sys
import torch
from torch import nn

def train(directory, out):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(2 * 2**30 / total)
    model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)]).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(16384, 4096, device="cuda")
    try:
        loss = model(x).square().mean()
        loss.backward()
        optimizer.step()
    except torch.OutOfMemoryError as exc:
        with open(out, "w") as fh:
            fh.write(str(exc))
        raise
"""

IN_PROCESS = (
    STEP
    + """
import memfit.oom
from memfit.oom import _observer

directory, out = sys.argv[1], sys.argv[2]
hook = memfit.oom_report(directory)
assert not torch.cuda.is_initialized(), "oom_report initialised CUDA"
try:
    with hook:
        train(directory, out)
except torch.OutOfMemoryError:
    pass
print("STATE", json.dumps(_observer.state()))
print("REPORTS", json.dumps([str(r.report) for r in hook.reports]))
"""
)

UNCHANGED = STEP + "\ntrain(sys.argv[1], sys.argv[2])\n"


def _tried(message: str) -> str:
    found = re.search(r"Tried to allocate ([0-9.]+ [KMG]iB)", message)
    assert found, message
    return found.group(1)


def _check_report(directory: Path, message: str) -> dict:
    (report,) = directory.glob("oom-*.md")
    (snapshot,) = directory.glob("oom-*.pickle")
    facts = json.loads(report.with_suffix(".json").read_text())
    text = report.read_text()
    size = _tried(message)
    assert f"tried to allocate {size} on cuda:0" in text  # names the failing allocation
    assert facts["status"] == "complete"
    assert facts["failure"]["fraction_limited"] is True
    assert facts["failure"]["phase"] == "forward"
    assert facts["model"]["name"] == "Sequential"
    assert facts["model"]["parameter_bytes"] == 8 * (4096 * 4096 + 4096) * 4
    assert facts["analysis"]["events"] > 0  # the trace was recorded and analysed
    assert facts["fixes"] and facts["fixes"][0]["saving"] > 0
    snap = memfit.snapshot.load(snapshot)
    assert memfit.snapshot.report(snap, what_if=False).ooms
    return facts


def test_oom_report_in_process(tmp_path):
    script = tmp_path / "step.py"
    script.write_text(textwrap.dedent(IN_PROCESS))
    out = tmp_path / "message.txt"
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "oom"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    state = json.loads(run.stdout.split("STATE ", 1)[1].splitlines()[0])
    assert state["attached"] is True
    reports = json.loads(run.stdout.split("REPORTS ", 1)[1].splitlines()[0])
    assert len(reports) == 1
    facts = _check_report(tmp_path / "oom", out.read_text())
    assert facts["failure"]["alloc_size"] == 256 * 2**20
    print(Path(reports[0]).read_text())


def test_oom_report_through_memfit_run(tmp_path, capfd):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(UNCHANGED))
    out = tmp_path / "message.txt"
    result = run_with_report(
        [sys.executable, str(script), "-", str(out)], tmp_path / "oom", render=oom_markdown
    )
    assert result.returncode == 1  # the uncaught OutOfMemoryError, passed through
    assert len(result.reports) == 1
    assert "OutOfMemoryError" in capfd.readouterr().err
    _check_report(tmp_path / "oom", out.read_text())


# The forward fits (the cap is its own peak plus 32 MiB); the backward's first large gradient
# does not. The allocation fails on the autograd engine's thread, not the script's.
BACKWARD = """
import json, sys
import torch
from torch import nn
import memfit.oom

directory = sys.argv[1]
model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)]).cuda()
x = torch.randn(8192, 4096, device="cuda")
loss = model(x).square().mean()
torch.cuda.synchronize()
cap = torch.cuda.memory_reserved() + 32 * 2**20
del loss
torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(0).total_memory)
with memfit.oom_report(directory) as hook:
    try:
        model(x).square().mean().backward()
    except torch.OutOfMemoryError as exc:
        print("MESSAGE", str(exc).splitlines()[0])
print("REPORTS", len(hook.reports))
"""


def test_oom_report_for_an_oom_in_the_backward_pass(tmp_path):
    script = tmp_path / "backward.py"
    script.write_text(textwrap.dedent(BACKWARD))
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "oom")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "MESSAGE" in run.stdout and "REPORTS 1" in run.stdout, run.stdout
    (report,) = (tmp_path / "oom").glob("oom-*.md")
    facts = json.loads(report.with_suffix(".json").read_text())
    assert facts["status"] == "complete"
    assert facts["failure"]["phase"] == "backward"
    assert facts["failure"]["fraction_limited"] is True
    assert facts["fixes"]
    print(report.read_text())


DDP_OOM = """
import os, torch, torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = DDP(nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(8)]).cuda())
x = torch.randn(65536, 4096, device="cuda")  # 1 GiB of input; the activations do not fit
model(x).square().mean().backward()
dist.destroy_process_group()
"""


def test_an_oom_in_a_rank_of_a_ddp_job_is_reported_with_its_rank(tmp_path):
    """A one-rank DDP job under torchrun, capped by memfit run --limit: an OOM report from a
    rank of a DDP job, on one GPU."""
    script = tmp_path / "ddp_oom.py"
    script.write_text(textwrap.dedent(DDP_OOM))
    argv = [sys.executable, "-m", "memfit", "run", "--oom-dir", str(tmp_path / "oom")]
    argv += ["--limit", "6GiB", "--framework", "torch", "--json", "--"]
    argv += [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", str(script)]
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root / "src") + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0, done.stderr[-3000:]
    doc = json.loads(done.stdout[done.stdout.index("{\n") :])
    (report,) = doc["reports"]
    text = Path(report["report"]).read_text()
    assert " · rank 0 of 1 (nccl, local rank 0) · " in text
    data = json.loads(Path(report["json"]).read_text())
    assert data["distributed"] == {"rank": 0, "world_size": 1, "local_rank": 0, "backend": "nccl"}
    assert data["failure"]["fraction_limited"] is True
