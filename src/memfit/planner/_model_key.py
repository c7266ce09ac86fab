"""Which model a plan was made for: its class, parameter elements and parameter tensors.

``memfit.plan`` records :func:`model_key` of the model it planned for, and ``memfit.apply``
refuses a model whose key differs, before it changes anything: a plan's micro-batch and
checkpointing are sized for that model's memory, not for another's. The key reads only the
parameters' shapes, so it is the same on meta, CPU and CUDA, in any dtype (pure bf16 keeps it),
and with activation checkpointing on (memfit's wrapping and the models' own switches change
``forward``, not the parameters). A ``torch.compile`` or ``DistributedDataParallel`` wrapper is
looked through to the model inside it. Tied weights count once, as ``parameters()`` lists them.
"""

from __future__ import annotations

from torch import nn

from memfit._errors import InvalidInputError

__all__ = ["model_key", "unwrapped_model"]


def unwrapped_model(model: nn.Module) -> nn.Module:
    """The model inside a ``torch.compile`` (``_orig_mod``) or (Distributed)DataParallel
    (``module``) wrapper; the model itself when it has neither."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
        if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            model = model.module
            continue
        return model


def model_key(model: nn.Module) -> str:
    """``"<class name>/<parameter elements>/<parameter tensors>"``, e.g.
    ``"GPT2LMHeadModel/124439808/148"``: what identifies the model a plan was made for."""
    if not isinstance(model, nn.Module):
        raise InvalidInputError(
            f"model_key needs a torch.nn.Module, not {type(model).__name__}: pass the model "
            "itself (the plan identifies the model by its class and parameters)."
        )
    inner = unwrapped_model(model)
    params = list(inner.parameters())
    elements = sum(p.numel() for p in params)
    return f"{type(inner).__name__}/{elements}/{len(params)}"
