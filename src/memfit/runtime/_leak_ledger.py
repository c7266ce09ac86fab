"""The leak detector's ledger: live storages on one device, with their shapes and sites.

A :class:`TorchDispatchMode` sits below autograd, so it sees every aten op, forward and
backward, and the tensors it returns, including those autograd then saves for backward and
that no Python variable names. A storage the ledger has not seen is new: it notes its bytes,
shape, dtype, the step it appeared in and, while sites are on, where it was created; a
finalizer on the storage drops it when the last tensor using it goes.

Cost: one Python call per op (a few microseconds) plus, while sites are on, a walk up the
Python stack for each new storage. The detector keeps the ledger on for the whole run only on
the CPU, where PyTorch counts no allocated bytes; on CUDA it turns it on only while growth is
suspected.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["Entry", "Ledger", "describe_frame", "user_frame"]

_TORCH, _LIBRARY, _USER = 0, 1, 2
_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_ROOTS = tuple(
    {
        os.path.abspath(p)
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(key))
    }
)
_kinds: dict[CodeType, int] = {}


def _kind(code: CodeType) -> int:
    found = _kinds.get(code)
    if found is None:
        name = code.co_filename
        parts = name.replace("\\", "/").split("/")
        if not name.endswith(".py") or "torch" in parts or name.startswith(_HERE):
            found = _TORCH
        elif name.startswith(_LIBRARY_ROOTS) or "site-packages" in parts:
            found = _LIBRARY
        else:
            found = _USER
        _kinds[code] = found
    return found


def describe_frame(frame: FrameType) -> str:
    """``path:line in function``; paths under the working directory are relative."""
    path = frame.f_code.co_filename
    cwd = os.getcwd()
    if path.startswith(cwd + os.sep):
        path = os.path.relpath(path, cwd)
    elif "site-packages" in path:
        path = path.split("site-packages" + os.sep, 1)[-1]
    return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"


def user_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame of ``frame``'s stack that is user code (not torch, not a library)."""
    while frame is not None and _kind(frame.f_code) != _USER:
        frame = frame.f_back
    return frame


def _sites(frame: FrameType | None) -> tuple[str, str]:
    """(site, caller): the innermost frame outside torch and the innermost user frame."""
    site = caller = ""
    while frame is not None and not caller:
        kind = _kind(frame.f_code)
        if kind != _TORCH and not site:
            site = describe_frame(frame)
        if kind == _USER:
            caller = describe_frame(frame)
        frame = frame.f_back
    return site or "(inside torch)", caller


@dataclass(frozen=True)
class Entry:
    """One live storage: its bytes, the first tensor seen on it, when and where it appeared."""

    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    step: int
    site: str  # "" when it appeared while sites were off
    caller: str


class Ledger(TorchDispatchMode):
    """Live storages of ``device_type`` created by ops while this mode is active."""

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self.device_type = device_type
        self.live: dict[int, Entry] = {}
        self.live_bytes = 0
        self.sites = False  # walk the stack of each new storage
        self.step = 0  # the step that new storages belong to
        self.active = False
        self._lock = threading.Lock()

    def start(self) -> None:
        if not self.active:
            self.__enter__()
            self.active = True

    def stop(self) -> None:
        if self.active:
            self.__exit__(None, None, None)
            self.active = False

    def clear(self) -> None:
        with self._lock:
            self.live.clear()
            self.live_bytes = 0

    def key(self, t: torch.Tensor) -> int | None:
        """The ledger's key for ``t``'s storage, or None for tensors it does not track."""
        if t.device.type != self.device_type or t.layout != torch.strided:
            return None
        return int(t.untyped_storage()._cdata)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        key = self.key(t)
        if key is None or key in self.live:
            return
        storage = t.untyped_storage()
        nbytes = int(storage.nbytes())
        if nbytes == 0:
            return
        site, caller = _sites(sys._getframe(2)) if self.sites else ("", "")
        dtype = str(t.dtype).replace("torch.", "")
        entry = Entry(nbytes, tuple(t.shape), dtype, self.step, site, caller)
        with self._lock:
            self.live[key] = entry
            self.live_bytes += nbytes
        weakref.finalize(storage, self._freed, key, entry)

    def _freed(self, key: int, entry: Entry) -> None:
        with self._lock:
            if self.live.get(key) is entry:
                del self.live[key]
                self.live_bytes -= entry.nbytes
