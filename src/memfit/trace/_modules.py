"""Which module is running: the forward call stack, and in backward the module that created the
autograd node being run (stamped on the node's metadata when the forward made it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["ModuleTracker"]

_KEY = "memfit_module"


def _metadata(node: Any) -> dict[str, Any]:
    """The per-node dict autograd keeps for users (``Node.metadata``)."""
    meta: dict[str, Any] = node.metadata
    return meta


class ModuleTracker:
    """Knows the dotted path of the module running now, in forward and in backward."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}
        self._stack: list[str] = []

    def name_modules(self, model: nn.Module) -> None:
        for name, module in model.named_modules():
            self._names.setdefault(id(module), name or type(model).__name__)

    def current(self) -> str:
        node = torch._C._current_autograd_node()
        if node is not None:
            module = _metadata(node).get(_KEY)
            return f"{module} (backward)" if module else "(backward)"
        return self._stack[-1] if self._stack else ""

    def stamp(self, out: Any) -> None:
        """Remember the current module on the autograd node that produced ``out``."""
        if not self._stack or not isinstance(out, torch.Tensor):
            return
        fn = out.grad_fn
        if fn is not None:
            _metadata(fn).setdefault(_KEY, self._stack[-1])

    def _pre(self, module: nn.Module, args: Any) -> None:
        self._stack.append(self._names.get(id(module), type(module).__name__))

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._stack:
            self._stack.pop()

    @contextmanager
    def active(self) -> Iterator[None]:
        pre = nn.modules.module.register_module_forward_pre_hook(self._pre)
        post = nn.modules.module.register_module_forward_hook(self._post, always_call=True)
        try:
            yield
        finally:
            pre.remove()
            post.remove()
            self._stack.clear()
