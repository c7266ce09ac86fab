"""Who holds the leaked tensors: variables in the training loop's frames that refer to them.

Run once, when a leak is reported: it looks at the local variables of the frames that called
``LeakDetector.step()`` (and one level into their containers and objects) for tensors whose
storage appeared during the growing steps. A list of losses that still carry ``grad_fn`` is
the classic case: each keeps its whole autograd graph, and the activations saved in it, alive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

from memfit.runtime._leak_ledger import describe_frame

__all__ = ["LeakHolder", "find_holders"]

_MAX_FRAMES = 16
_MAX_ITEMS = 100_000  # elements looked at in one container


@dataclass(frozen=True)
class LeakHolder:
    """A variable that refers to tensors from the growing steps."""

    name: str  # "losses", "self.history"
    where: str  # the frame: "train.py:42 in train"
    kind: str  # "list of 12", "Tensor"
    tensors: int  # how many of its tensors appeared during the growing steps
    grad_fn: str  # autograd node of one of them ("" if none): the graph stays alive

    def describe(self) -> str:
        graph = f", with grad_fn={self.grad_fn} (keeps its autograd graph)" if self.grad_fn else ""
        return (
            f"{self.name} ({self.kind}) at {self.where} holds {self.tensors} new tensor(s){graph}"
        )


def find_holders(
    frame: FrameType | None, is_new: Callable[[torch.Tensor], bool]
) -> list[LeakHolder]:
    """Holders among the locals of ``frame`` and the frames that called it, innermost first."""
    holders: list[LeakHolder] = []
    seen: set[int] = set()
    depth = 0
    while frame is not None and depth < _MAX_FRAMES:
        where = describe_frame(frame)
        for name, value in list(frame.f_locals.items()):
            for label, obj in _candidates(name, value):
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                found = _new_tensors(obj, is_new)
                if found:
                    grad = next((t.grad_fn for t in found if t.grad_fn is not None), None)
                    holders.append(
                        LeakHolder(
                            label,
                            where,
                            _kind(obj),
                            len(found),
                            type(grad).__name__ if grad is not None else "",
                        )
                    )
        frame = frame.f_back
        depth += 1
    return sorted(holders, key=lambda h: -h.tensors)


def _candidates(name: str, value: Any) -> Iterable[tuple[str, Any]]:
    """The variable itself and, for an object (``self``), its attributes."""
    yield name, value
    if isinstance(value, (torch.Tensor, list, tuple, dict, set, str, bytes, int, float)):
        return
    attrs = getattr(value, "__dict__", None)
    if isinstance(attrs, dict):
        for attr, inner in list(attrs.items()):
            if isinstance(inner, (torch.Tensor, list, tuple, dict, set)):
                yield f"{name}.{attr}", inner


def _new_tensors(obj: Any, is_new: Callable[[torch.Tensor], bool]) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj] if is_new(obj) else []
    if isinstance(obj, dict):
        items: Iterable[Any] = obj.values()
    elif isinstance(obj, (list, tuple, set)):
        items = obj
    else:
        return []
    found = []
    for i, item in enumerate(items):
        if i >= _MAX_ITEMS:
            break
        if isinstance(item, torch.Tensor) and is_new(item):
            found.append(item)
    return found


def _kind(obj: Any) -> str:
    if isinstance(obj, torch.Tensor):
        return f"Tensor {tuple(obj.shape)}"
    return f"{type(obj).__name__} of {len(obj)}"
