"""What memfit's own fake kernels (``_fake_kernels``, ``_bnb_int8``) share: an op's argument
by position or keyword, and an output made as a meta tensor."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["arg", "meta"]


def meta(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An output of ``shape`` and ``dtype`` on the meta device."""
    return torch.empty(shape, dtype=dtype, device="meta")


def arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any) -> Any:
    """An op's argument ``i`` (``name`` where given by keyword), else ``default``."""
    return args[i] if len(args) > i else kwargs.get(name, default)
