"""Who a GPU process is: user, command line, container and pod, from ``/proc``.

NVML gives pids only (``nvidia-smi`` shows the process name, ``ps -o user,args -p PID`` the
rest). Reads are cached per process (keyed by pid and start time, so a reused pid is read
again); a process that exits mid-read gives ``None``, never an error. Where ``/proc`` does not
exist (not Linux) nothing is known and the views show ``N/A``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Protocol

from memfit.monitor._publisher import start_ticks

__all__ = ["LinuxProcs", "ProcInfo", "ProcReader", "command_line", "parse_cgroup"]


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """What ``/proc/PID`` says about a process."""

    pid: int
    uid: int | None
    user: str | None
    command: str | None
    container: str | None
    pod: str | None
    start_ticks: int | None


class ProcReader(Protocol):
    """Reads a process's identity; ``None`` when it does not exist (any more)."""

    def read(self, pid: int) -> ProcInfo | None: ...


_HEX_ID = r"([0-9a-f]{12,64})"
# docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>.scope, libpod-<id>.scope (systemd)
_SCOPE = re.compile(rf"(?:docker|cri-containerd|containerd|crio|libpod)-{_HEX_ID}\.scope")
# /docker/<id>, /libpod/<id>, /crio/<id>, /containerd/<id> (cgroupfs driver)
_RUNTIME_DIR = re.compile(rf"/(?:docker|libpod|crio|containerd|actions_job)/{_HEX_ID}(?:/|$)")
# kubepods-burstable-pod<uid with _>.slice (systemd) or /kubepods/.../pod<uid>/ (cgroupfs)
_POD_SLICE = re.compile(r"kubepods[-\w]*-pod([0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12})\.slice")
_POD_DIR = re.compile(r"/kubepods(?:/[\w-]+)*?/pod([0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})/")
_LAST_ID = re.compile(rf"/{_HEX_ID}$")


def parse_cgroup(text: str) -> tuple[str | None, str | None]:
    """``(container id, pod uid)`` from the text of ``/proc/PID/cgroup``, where it shows them.

    Understands Docker, containerd, CRI-O and Podman under the systemd and cgroupfs drivers,
    cgroup v1 and v2, and Kubernetes pod slices (the pod UID is given with dashes, as
    ``kubectl get pod -o jsonpath='{.metadata.uid}'`` prints it).
    """
    container = pod = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1].strip()
        if not path or path == "/":
            continue
        if pod is None:
            match = _POD_SLICE.search(path)
            if match:
                pod = match.group(1).replace("_", "-")
            else:
                match = _POD_DIR.search(path + "/")
                pod = match.group(1) if match else None
        if container is None:
            match = _SCOPE.search(path) or _RUNTIME_DIR.search(path)
            if match is None and "kubepods" in path:
                match = _LAST_ID.search(path)
            container = match.group(1) if match else None
    return container, pod


def command_line(args: list[str]) -> str | None:
    """One line for the arguments of a command: ``python -c`` scripts carry newlines and tabs,
    which would break a table row, a CSV line or a Prometheus label; runs of white space
    become one space."""
    return " ".join(" ".join(args).split()) or None


def _user(uid: int) -> str | None:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return None


class LinuxProcs:
    """:class:`ProcReader` over ``/proc`` (``root`` for tests), cached per process."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root
        self._cache: dict[int, ProcInfo] = {}
        # start times read in the sample under way (None: no sample, read every time): a
        # process on several GPUs, or one that publishes, is asked about several times per
        # sample, and /proc reads are the sampler's main cost
        self._ticks_now: dict[int, int | None] | None = None

    def begin_sample(self) -> None:
        """Until :meth:`end_sample`, read each process's start time once."""
        self._ticks_now = {}

    def end_sample(self) -> None:
        self._ticks_now = None

    def read(self, pid: int) -> ProcInfo | None:
        memo = self._ticks_now
        if memo is None:
            ticks = start_ticks(pid, self.root)
        elif pid in memo:
            ticks = memo[pid]
        else:
            ticks = memo[pid] = start_ticks(pid, self.root)
        if ticks is None:
            self._cache.pop(pid, None)
            return None
        cached = self._cache.get(pid)
        if cached is not None and cached.start_ticks == ticks:
            return cached
        info = self._read(pid, ticks)
        if info is not None:
            self._cache[pid] = info
        return info

    def forget_except(self, pids: set[int]) -> None:
        """Drop cached processes not in ``pids`` (call once per sample)."""
        for pid in set(self._cache) - pids:
            del self._cache[pid]

    def _read(self, pid: int, ticks: int) -> ProcInfo | None:
        base = os.path.join(self.root, str(pid))
        try:
            with open(os.path.join(base, "status")) as f:
                uid_line = next((line for line in f if line.startswith("Uid:")), None)
            with open(os.path.join(base, "cmdline"), "rb") as fb:
                raw = fb.read()
            try:
                with open(os.path.join(base, "cgroup")) as f:
                    cgroup = f.read()
            except OSError:
                cgroup = ""
        except (FileNotFoundError, ProcessLookupError):
            return None  # exited while we read it
        except OSError:  # e.g. hidepid: the process exists but is not ours to read
            return ProcInfo(pid, None, None, None, None, None, ticks)
        uid = int(uid_line.split()[1]) if uid_line else None
        parts = [p.decode(errors="replace") for p in raw.split(b"\0") if p]
        container, pod = parse_cgroup(cgroup)
        user = None if uid is None else _user(uid)
        return ProcInfo(pid, uid, user, command_line(parts), container, pod, ticks)
