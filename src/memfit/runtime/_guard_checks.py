"""What ``AutoMicrobatch`` checks at construction, and its default loss: refusing, before any
step runs, what would fail only at the first one."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from memfit._errors import InvalidInputError
from memfit.runtime._sharded import sharded_over_ranks

__all__ = ["check_callables", "check_parts", "default_loss", "refuse_sharded"]


def default_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """``model(**batch)`` for a mapping, else ``model(batch)``; its ``.loss`` or the tensor."""
    out = model(**batch) if isinstance(batch, Mapping) else model(batch)
    loss = out.get("loss") if isinstance(out, Mapping) else getattr(out, "loss", out)
    if not isinstance(loss, torch.Tensor):
        raise InvalidInputError(
            f"The model returned a {type(out).__name__} with no loss, and AutoMicrobatch was "
            "given no loss_fn. Give loss_fn(model, batch) -> scalar loss tensor."
        )
    return loss


def check_parts(model: Any, optimizer: Any, loss_fn: Any, scaler: Any) -> None:
    """Refuse, at construction, what would fail only at the first step."""
    if not isinstance(model, torch.nn.Module):
        raise InvalidInputError(
            f"AutoMicrobatch needs a torch.nn.Module as model, not {_what(model)}: pass the "
            "model itself, e.g. AutoMicrobatch(model, optimizer, loss_fn)."
        )
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidInputError(
            f"optimizer={_what(optimizer)} is not a torch.optim.Optimizer: AutoMicrobatch steps "
            "the optimizer you built, so pass it, e.g. torch.optim.SGD(model.parameters(), "
            "lr=0.01), or None and call backward_only(batch) then step it yourself."
        )
    if loss_fn is not None:
        if not callable(loss_fn):
            raise InvalidInputError(
                f"loss_fn={_what(loss_fn)} is not callable: give a function "
                "loss_fn(model, batch) -> scalar loss tensor, or None to use model(**batch).loss."
            )
        if not _accepts(loss_fn, 2):
            raise InvalidInputError(
                f"loss_fn {getattr(loss_fn, '__name__', loss_fn)!s} cannot be called as "
                "loss_fn(model, batch): AutoMicrobatch calls it with the model and a "
                "(micro-)batch. Define it as def loss_fn(model, batch): ..."
            )
    if scaler is not None and not all(
        callable(getattr(scaler, name, None)) for name in ("scale", "step", "update", "unscale_")
    ):
        raise InvalidInputError(
            f"scaler={_what(scaler)} is not a gradient scaler: pass torch.amp.GradScaler() "
            "(for fp16 mixed precision), or leave it out."
        )


def check_callables(**functions: Any) -> None:
    for name, fn in functions.items():
        if fn is not None and not callable(fn):
            raise InvalidInputError(
                f"{name}={_what(fn)} is not callable: give a function, or leave it out."
            )


def _accepts(fn: Callable[..., Any], n: int) -> bool:
    """Whether ``fn`` can be called with ``n`` positional arguments (True where unknown)."""
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins): the call will tell
        return True
    return True


def _what(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{text} (a {type(value).__name__})"


def refuse_sharded(model: torch.nn.Module, what: str) -> None:
    """``memfit.apply`` and ``memfit.fit`` change an unsharded model; refuse one FSDP2 shards
    over several ranks before anything changes."""
    if sharded_over_ranks(model):
        raise InvalidInputError(
            f"{what} does not take a model FSDP2 shards over several ranks: its changes "
            "(checkpoint wrappers, the optimizer variant, the micro-batches) are made to an "
            "unsharded model. Guard the FSDP2 step with memfit.AutoMicrobatch(model, optimizer, "
            "loss_fn, microbatch_size=...) and make the plan's other changes before fully_shard."
        )
