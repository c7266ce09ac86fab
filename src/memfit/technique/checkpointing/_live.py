"""Activation checkpointing switched on in a user's live model, and off again: memfit's wrapping
of the repeated blocks (selective, partial, or full where the model has no switch of its own or
activation offload must wrap it in turn), or the model's own switch (transformers, timm). What
it is and what it undoes is said before anything changes (:func:`live_checkpointing`)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from memfit._errors import InvalidInputError
from memfit.technique.checkpointing._blocks import (
    checkpoint_blocks,
    checkpointing_on,
    chosen_blocks,
    find_blocks,
    unwrap_blocks,
)

__all__ = ["LiveCheckpointing", "live_checkpointing", "own_switch"]

_MISSING = object()
# instance attributes the models' own checkpointing switches set (transformers, timm)
_SWITCH_ATTRS = (
    "gradient_checkpointing",
    "_gradient_checkpointing_func",
    "_require_grads_hook",
    "_require_grads_hooks",
    "grad_checkpointing",
)


@dataclass(frozen=True)
class LiveCheckpointing:
    """Checkpointing as it will be switched on in one model: ``text`` says how; ``switch_on``
    does it to that model and returns what switches it off again (and puts back what
    switching on changed), holding the model weakly (a plan's record hangs on the model)."""

    text: str
    switch_on: Callable[[nn.Module], Callable[[], None]]


def own_switch(model: nn.Module) -> str | None:
    """Which checkpointing switch of its own the model has: ``"transformers"``, ``"timm"``,
    or ``None``."""
    if callable(getattr(model, "gradient_checkpointing_enable", None)):
        return "transformers"
    if callable(getattr(model, "set_grad_checkpointing", None)):
        return "timm"
    return None


def live_checkpointing(
    setting: bool | str | float, model: nn.Module, *, wrapped: bool
) -> LiveCheckpointing:
    """How ``activation_checkpointing=setting`` is switched on in ``model`` (``wrapped``: by
    memfit's wrapping of its blocks even where it has a switch of its own), checked: a model
    whose own checkpointing is on already is refused where memfit would wrap its blocks again,
    and one without repeated blocks where there are none to wrap."""
    if setting is True and not wrapped:
        library = own_switch(model)
        if library is not None:
            if checkpointing_on(model):
                text = "full activation checkpointing (already on, left as it was)"
                return LiveCheckpointing(text, lambda m: lambda: None)
            text = f"full activation checkpointing (the model's own switch, {library})"
            return LiveCheckpointing(text, lambda m: _switch_on(m, library))
    selective = setting == "selective"
    fraction = setting if isinstance(setting, float) else 1.0
    kind = "selective" if selective else "full" if fraction >= 1.0 else "partial"
    if checkpointing_on(model):
        raise InvalidInputError(
            f"The plan chooses {kind} checkpointing, but "
            f"{type(model).__name__} already has its own gradient checkpointing switched on, "
            "and its blocks would be checkpointed twice. Switch it off "
            "(model.gradient_checkpointing_disable()) before memfit.apply."
        )
    blocks = find_blocks(model)  # refuses a model without repeated blocks, now
    chosen = len(chosen_blocks(blocks, fraction))
    of = f" of {len(blocks)}" if chosen < len(blocks) else ""
    text = (
        f"{'selective' if selective else 'full'} activation checkpointing of "
        f"{chosen}{of} blocks (memfit's)"
    )
    return LiveCheckpointing(text, lambda m: _wrap(m, selective, fraction))


def _wrap(model: nn.Module, selective: bool, fraction: float) -> Callable[[], None]:
    """memfit's checkpointing of the model's blocks; returns what unwraps them."""
    cache = _use_cache(model)
    checkpoint_blocks(model, selective=selective, fraction=fraction)
    ref = weakref.ref(model)

    def undo() -> None:
        module = ref()
        if module is not None:
            unwrap_blocks(module)
        _restore_use_cache(cache)

    return undo


def _switch_on(model: Any, library: str) -> Callable[[], None]:
    """The model's own full checkpointing switched on; returns what switches it off and drops
    what switching on left (input hooks, attributes, ``use_cache``)."""
    attrs = [
        (weakref.ref(m), {n: m.__dict__.get(n, _MISSING) for n in _SWITCH_ATTRS})
        for m in model.modules()
    ]
    cache = _use_cache(model)
    if library == "timm":
        model.set_grad_checkpointing(True)
    elif callable(getattr(model, "activation_checkpointing_enable", None)):
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref = weakref.ref(model)

    def undo() -> None:
        live: Any = ref()
        if live is None:
            return
        _switch_off(live, library)
        for module_ref, saved in attrs:
            module = module_ref()
            if module is None:
                continue
            for name, value in saved.items():
                if value is _MISSING:
                    module.__dict__.pop(name, None)
                else:
                    module.__dict__[name] = value
        _restore_use_cache(cache)

    return undo


def _switch_off(model: Any, library: str) -> None:
    if library == "timm":
        model.set_grad_checkpointing(False)
        return
    disable = getattr(model, "activation_checkpointing_disable", None)
    (disable if callable(disable) else model.gradient_checkpointing_disable)()
    if getattr(model, "_require_grads_hooks", None) and callable(
        getattr(model, "disable_input_require_grads", None)
    ):
        model.disable_input_require_grads()  # the embedding hook switching on added


def _use_cache(model: nn.Module) -> dict[int, tuple[Any, Any]]:
    """The ``config.use_cache`` of every module's config, by config (checkpointing turns it
    off)."""
    found: dict[int, tuple[Any, Any]] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "use_cache"):
            found.setdefault(id(config), (config, config.use_cache))
    return found


def _restore_use_cache(saved: dict[int, tuple[Any, Any]]) -> None:
    for config, value in saved.values():
        config.use_cache = value
