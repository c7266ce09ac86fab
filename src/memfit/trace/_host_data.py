"""Tensors made from host data (``torch.tensor([...])``) and read back on the host (``.numpy()``).

Model code computes with tensors while it is built: RegNet's stage widths come from
``torch.arange(...).tolist()`` and ``torch.tensor([...])``, timm's drop-path rates from
``torch.linspace(...).tolist()``, and buffers are often ``torch.tensor(...)``. On the meta device
(like a GPU build, under ``torch.device``) ``torch.tensor(data)`` makes its meta tensor without
any op the trace sees, so its values would be lost and its memory not recorded. Here it is made
on the host and moved, as on a GPU: the move is an op, so the recorder sees the allocation (in
the order the GPU build makes it) and the shadow values (``_shadow.py``) keep the data for
the code that reads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

__all__ = ["HOST_DATA_FUNCS", "copies_to_host", "from_host_data", "host_copy"]

_META = torch.device("meta")
_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}
HOST_DATA_FUNCS = {*_FACTORIES, torch.Tensor.new_tensor, torch.Tensor.numpy}


def _is_meta(device: Any) -> bool:
    return device is not None and torch.device(device).type == "meta"


def _has_tensors(data: Any) -> bool:
    return any(isinstance(x, torch.Tensor) for x in tree_leaves(data))


def from_host_data(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any | None:
    """What ``func`` gives on a GPU, made so the trace sees it; None where nothing changes
    (a host device, or data that holds tensors already, which ops the trace sees make)."""
    if func is torch.Tensor.numpy:
        this = args[0]
        if not isinstance(this, torch.Tensor) or this.device.type != "meta":
            return None
        # a host copy (the shadow's values, see ``_shadow.py``), as a build on the CPU gives
        return this.cpu().numpy(*args[1:], **kwargs)
    if func is torch.Tensor.new_tensor:
        this, data = args[0], args[1] if len(args) > 1 else kwargs.get("data")
        device = kwargs.get("device", this.device)
        dtype = kwargs.get("dtype") or this.dtype
        if not _is_meta(device) or _has_tensors(data):
            return None
        return _moved(torch.tensor(data, dtype=dtype), kwargs.get("requires_grad", False))
    data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
    if not _is_meta(kwargs.get("device")) or _has_tensors(data):
        return None
    host_kwargs = {k: v for k, v in kwargs.items() if k in ("dtype", "copy")}
    host = func(*args, **host_kwargs)
    return _moved(host, bool(kwargs.get("requires_grad", False)))


def _moved(host: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    out = host.to(_META)
    if requires_grad:
        out.requires_grad_(True)
    return out


_COPIES = {torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default}
_MAX_GUESS_NUMEL = 1 << 24  # zeros are guessed for a host copy up to this size, refused above


def copies_to_host(func: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether the aten op ``func`` copies a meta tensor to the host (whose values are read)."""
    if func not in _COPIES:
        return False
    if func is torch.ops.aten.copy_.default:
        return bool(args[0].device.type == "cpu" and args[1].device.type == "meta")
    device = kwargs.get("device")
    return (
        device is not None and torch.device(device).type == "cpu" and args[0].device.type == "meta"
    )


def host_copy(
    func: Any,
    args: Any,
    kwargs: dict[str, Any],
    value: torch.Tensor | None,
    guess: Callable[[str, str], None],
) -> torch.Tensor:
    """The host tensor a :func:`copies_to_host` op gives: the source's ``value`` (its shadow)
    or, where none is known, zeros, told to ``guess(what, answer)`` for the notes."""
    src = args[1] if func is torch.ops.aten.copy_.default else args[0]
    if value is None:
        if src.numel() > _MAX_GUESS_NUMEL:
            raise NotImplementedError(
                f"a tensor of shape {tuple(src.shape)} is copied to the host (.tolist(), "
                ".cpu(), .numpy()), and memfit keeps no values of tensors that large. If the "
                "model's construction does this, pass the model itself, already built (on the "
                "CPU or the meta device), instead of its factory or name"
            )
        guess("a tensor copied to the host (.tolist(), .cpu(), .numpy())", "zeros")
        value = torch.zeros(src.shape, dtype=src.dtype)
    if func is torch.ops.aten.copy_.default:
        return args[0].copy_(value)  # type: ignore[no-any-return]
    options = {k: v for k, v in kwargs.items() if k in ("dtype", "memory_format")}
    return value.to(device="cpu", copy=True, **options)
