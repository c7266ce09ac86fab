"""The GPU a plan fits, from ``gpu=`` and ``budget=`` as :func:`memfit.plan` and
:func:`memfit.fit` take them.

Either alone is the memory to fit: a GPU name (its memory, and its speed for the step times) or
a size with a unit (``"24GiB"``; the speed of an H100, the default kind). Both together say
more than either: the kind of GPU ``gpu`` names, with only ``budget`` of its memory (a share
of a card, or a card whose other tenants hold the rest). Any other pair is refused, naming both.
"""

from __future__ import annotations

import dataclasses

from memfit._errors import InvalidInputError
from memfit._gpus import GPU, KNOWN_GPUS, resolve_gpu

__all__ = ["plan_target"]


def plan_target(budget: str | GPU | None, gpu: str | GPU | None) -> GPU:
    """The GPU to plan for: ``gpu`` or ``budget`` alone (the same thing: a GPU name or a
    size), or the kind ``gpu`` names holding ``budget`` bytes. Neither, two sizes or two GPU
    names are refused (:class:`~memfit.InvalidInputError`), as is anything
    :func:`memfit.resolve_gpu` refuses."""
    if budget is None:
        if gpu is None:
            raise InvalidInputError(
                "plan needs the GPU memory to fit: give gpu= a GPU name such as 'h100' or a "
                "size such as '24GiB' (budget= takes the same), e.g. memfit.plan(model, batch, "
                "gpu='24GiB')."
            )
        return resolve_gpu(gpu)
    if gpu is None:
        return resolve_gpu(budget)
    kind, memory = resolve_gpu(gpu), resolve_gpu(budget)
    if not _is_size(gpu, kind):
        if _is_size(budget, memory):
            return dataclasses.replace(kind, total=memory.total)
        raise InvalidInputError(
            f"gpu={gpu!r} and budget={budget!r} both name a GPU: give one of them, or "
            f"gpu={gpu!r} with budget= a size (e.g. budget='20GiB') to plan that GPU's speed "
            "in part of its memory."
        )
    raise InvalidInputError(
        f"gpu={gpu!r} and budget={budget!r} were both given, and gpu= is a size: they say "
        "the same thing twice. Give one of them, or gpu= a GPU name (e.g. gpu='a100-40g') "
        "with budget= a size to plan that GPU's speed in part of its memory."
    )


def _is_size(spec: str | GPU, resolved: GPU) -> bool:
    """Whether ``spec`` was a memory size, not a GPU (a name or a :class:`GPU` given)."""
    return not isinstance(spec, GPU) and resolved not in KNOWN_GPUS.values()
