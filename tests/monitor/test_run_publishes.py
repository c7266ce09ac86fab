"""``memfit run -- python train.py`` publishes the child's allocator stats, unchanged script."""

from __future__ import annotations

import json
import os
import sys
import textwrap

from memfit.oom import run_with_report
from memfit.report import oom_markdown

PY = sys.executable

PROBE = """
import json, os, sys, time
import torch
import _memfit_publisher as p
pub = p.active()
out = {"armed": pub is not None, "pid": os.getpid()}
if pub is not None:
    out.update(wait_for_cuda=pub.wait_for_cuda, directory=pub.directory, interval=pub.interval)
    time.sleep(3 * pub.interval)
    out["files"] = os.listdir(pub.directory)
{extra}
print("STATE", json.dumps(out))
"""


def _run(tmp_path, capfd, env_extra, extra=""):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(PROBE.replace("{extra}", extra)))
    env = dict(os.environ, MEMFIT_RUNTIME_DIR=str(tmp_path / "rt"), **env_extra)
    result = run_with_report([PY, str(script)], tmp_path / "oom", env=env, render=oom_markdown)
    out = capfd.readouterr().out
    assert result.returncode == 0, out
    return json.loads(out.split("STATE ", 1)[1].splitlines()[0])


def test_the_child_publishes_once_cuda_is_initialised(tmp_path, capfd):
    state = _run(tmp_path, capfd, {"MEMFIT_PUBLISH_INTERVAL": "0.05"})
    assert state["armed"] and state["wait_for_cuda"]
    assert state["directory"] == str(tmp_path / "rt") and state["interval"] == 0.05
    assert state["files"] == []  # CUDA never initialised on this machine: no file


def test_memfit_publish_0_turns_it_off(tmp_path, capfd):
    assert _run(tmp_path, capfd, {"MEMFIT_PUBLISH": "0"})["armed"] is False


def test_publish_in_the_script_takes_over(tmp_path, capfd):
    extra = """
import memfit
mine = memfit.publish(interval=0.05)
time.sleep(0.3)
out["after"] = {"armed_running": p.active() is not None, "mine": mine.running,
                "files": os.listdir(mine.directory)}
"""
    state = _run(tmp_path, capfd, {"MEMFIT_PUBLISH_INTERVAL": "0.05"}, extra)
    assert state["after"] == {
        "armed_running": False,
        "mine": True,
        "files": [f"{state['pid']}.json"],
    }
    assert os.listdir(tmp_path / "rt") == []  # removed at exit
