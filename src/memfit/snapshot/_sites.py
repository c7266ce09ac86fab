"""Where an allocation came from: the first stack frame outside torch's own code.

torch records stacks innermost frame first: its C++ frames (with ``stacks='all'``), then the
Python frames of torch itself (``torch/nn/modules/linear.py``, ``module.py``'s ``_call_impl``
...), then the model and training code. The *site* of an allocation is the first frame that
is Python and not under a ``torch/`` folder: the line of user (or library) code that asked
for the memory. A stack with no such frame (the autograd engine's threads have only C++
frames) is named after its autograd node (``(backward) MeanBackward0``) or its first aten
operator (``(op) div_Tensor``), else after its innermost frame.

torch shares one dict per distinct frame between all the stacks of a snapshot, so
:class:`SiteIndex` classifies each frame dict once, by identity.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["NO_FRAMES", "SiteIndex"]

NO_FRAMES = (
    "no stack frames recorded; record with "
    "torch.cuda.memory._record_memory_history(stacks='python') to see where memory is allocated"
)
_TORCH = re.compile(r"(?:^|[/\\])torch[/\\]")
_BACKWARD = re.compile(r"generated::(\w+?Backward\d*)")
_OP = re.compile(r"at::_ops::(\w+)::call")
_INTERNAL = -1


def _is_internal(filename: str) -> bool:
    return not filename.endswith(".py") or _TORCH.search(filename) is not None


def _describe(frame: Any) -> str:
    if not isinstance(frame, dict):
        return "(unknown)"
    return f"{frame.get('filename', '?')}:{frame.get('line', '?')} {frame.get('name', '?')}"


def _inside_torch(frames: list[Any]) -> str:
    names = [str(f.get("name", "")) for f in frames if isinstance(f, dict)]
    for pattern, label in ((_BACKWARD, "(backward)"), (_OP, "(op)")):
        for name in names:
            found = pattern.search(name)
            if found:
                return f"{label} {found.group(1)}"
    return f"(inside torch) {_describe(frames[0])}"


class SiteIndex:
    """Numbers the allocation sites of stacks, remembering each frame dict it has seen."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._by_name: dict[str, int] = {}
        self._frames: dict[int, int] = {}  # id(frame) -> site, or _INTERNAL
        self._alive: list[Any] = []  # the frames seen, so that their ids stay theirs
        # id(innermost frame) -> (the frames up to the site, the site) of the last stack seen
        # with it: most stacks repeat one of a few, and a list comparison checks that in C
        self._recent: dict[int, tuple[list[Any], int]] = {}

    def _name(self, name: str) -> int:
        found = self._by_name.get(name)
        if found is None:
            found = self._by_name[name] = len(self.names)
            self.names.append(name)
        return found

    def _classify(self, frame: Any) -> int:
        self._alive.append(frame)
        internal = not isinstance(frame, dict) or _is_internal(str(frame.get("filename", "")))
        site = _INTERNAL if internal else self._name(_describe(frame))
        self._frames[id(frame)] = site
        return site

    def site(self, frames: list[Any]) -> int:
        """The site of a non-empty stack."""
        recent = self._recent.get(id(frames[0]))
        if recent is not None and frames[: len(recent[0])] == recent[0]:
            return recent[1]
        known = self._frames
        for depth, frame in enumerate(frames):
            site = known.get(id(frame))
            if site is None:
                site = self._classify(frame)
            if site != _INTERNAL:
                self._recent[id(frames[0])] = (frames[: depth + 1], site)
                return site
        site = self._name(_inside_torch(frames))
        self._recent[id(frames[0])] = (list(frames), site)
        return site
