"""Who a GPU process is: /proc reads and the cgroup parser (container id, pod UID)."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from memfit.monitor import LinuxProcs, parse_cgroup
from memfit.monitor._publisher import start_ticks

CID = "3f4e1c2b9a7d8e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
POD = "8d1b4c6e-2f3a-4b5c-9d8e-7f6a5b4c3d2e"
POD_ = POD.replace("-", "_")

# the path formats the container runtimes and kubelet document for their cgroups
CASES = [
    (f"12:memory:/docker/{CID}\n11:cpu:/docker/{CID}\n", CID, None),  # docker, cgroupfs v1
    (f"0::/system.slice/docker-{CID}.scope\n", CID, None),  # docker, systemd v2
    (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_}.slice/cri-containerd-{CID}.scope\n",
        CID,
        POD,
    ),  # kubelet systemd driver + containerd
    (f"11:memory:/kubepods/besteffort/pod{POD}/{CID}\n", CID, POD),  # kubelet cgroupfs
    (f"0::/kubepods.slice/kubepods-pod{POD_}.slice/crio-{CID}.scope\n", CID, POD),  # CRI-O
    (
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope\n",
        CID,
        None,
    ),  # rootless podman
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None),  # a login session
    ("4:memory:/process_api/18bb15541a85b28e5e95de8a15572224\n0::/\n", None, None),  # this box
    ("", None, None),
]


@pytest.mark.parametrize(("text", "container", "pod"), CASES)
def test_cgroup_formats(text, container, pod):
    assert parse_cgroup(text) == (container, pod)


def test_this_process_reads_as_ps_shows_it():
    info = LinuxProcs().read(os.getpid())
    assert info is not None
    assert info.uid == os.getuid()
    assert info.user == pwd.getpwuid(os.getuid()).pw_name
    own = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()
    assert info.command is not None and own in info.command  # python, pytest or an xdist worker
    assert info.start_ticks == start_ticks(os.getpid())
    assert (info.container, info.pod) == parse_cgroup(Path("/proc/self/cgroup").read_text())


def test_an_exited_process_is_none_not_an_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert LinuxProcs().read(child.pid) is None
    assert start_ticks(child.pid) is None


def _fake_proc(root, pid, ticks, *, status=True):
    d = root / str(pid)
    d.mkdir(parents=True)
    fields = ["S"] + ["0"] * 18 + [str(ticks)] + ["0"] * 10
    (d / "stat").write_text(f"{pid} (python (x)) " + " ".join(fields) + "\n")
    if status:
        (d / "status").write_text("Name:\tpython\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n")
    (d / "cmdline").write_bytes(b"python\0train.py\0--lr\x001e-4\0")
    (d / "cgroup").write_text(f"0::/system.slice/docker-{CID}.scope\n")


def test_a_proc_tree_is_parsed_and_cached_by_start_time(tmp_path):
    _fake_proc(tmp_path, 4242, 123456)
    procs = LinuxProcs(str(tmp_path))
    info = procs.read(4242)
    assert info is not None
    assert (info.uid, info.user, info.command) == (0, "root", "python train.py --lr 1e-4")
    assert (info.container, info.start_ticks) == (CID, 123456)
    # the pid is reused by a later process: read again, not served from the cache
    (tmp_path / "4242" / "cmdline").write_bytes(b"other\0")
    assert procs.read(4242) is info
    stat = tmp_path / "4242" / "stat"
    stat.write_text(stat.read_text().replace(" 123456 ", " 999999 "))
    assert procs.read(4242).command == "other"


def test_a_process_that_exits_mid_read_gives_none(tmp_path):
    _fake_proc(tmp_path, 77, 5, status=False)  # stat still there, status already gone
    assert LinuxProcs(str(tmp_path)).read(77) is None


def test_a_multi_line_command_becomes_one_line(tmp_path):
    # `python -c` with a script: the row, the CSV line and the Prometheus label stay one line
    _fake_proc(tmp_path, 4343, 99)
    (tmp_path / "4343" / "cmdline").write_bytes(b"python\0-c\0import torch\n\tx = 1\n\0 8\0")
    info = LinuxProcs(str(tmp_path)).read(4343)
    assert info is not None and info.command == "python -c import torch x = 1 8"


def test_start_times_are_read_once_per_sample(tmp_path):
    # a pid asked about twice in one sample (two GPUs, or its published file) costs one read;
    # the next sample reads again and so sees a reused pid
    _fake_proc(tmp_path, 4444, 100)
    procs = LinuxProcs(str(tmp_path))
    procs.begin_sample()
    assert procs.read(4444).start_ticks == 100
    stat = tmp_path / "4444" / "stat"
    stat.write_text(stat.read_text().replace(" 100 ", " 200 "))
    assert procs.read(4444).start_ticks == 100
    procs.end_sample()
    assert procs.read(4444).start_ticks == 200  # outside a sample: read every time
