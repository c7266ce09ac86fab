"""torch.compile's activation memory budget: the share of the activations a compiled training
step's forward may save for backward (``torch._functorch.config.activation_memory_budget``,
1.0 by default). Below 1, inductor's min-cut partitioner recomputes activations in backward
until what is saved fits that share of what a compile at 1.0 saves: torch's own selective
checkpointing, for compiled models only. Its effect on memory is not monotonic
(pytorch/pytorch#197838): each value is estimated, never interpolated.

The setting is read when a model is compiled, from torch's process-wide config. memfit sets it
around its own compile (the capture on the CPU, the run on the GPU) when a workload names one,
and otherwise compiles with the process's value, which an estimate names when it is not 1.0.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from memfit._errors import InvalidInputError

__all__ = [
    "budget_in_effect",
    "check_memory_budget",
    "compiled_with_budget",
    "memory_budget_words",
]


def check_memory_budget(value: object) -> None:
    """``activation_memory_budget=`` is ``None`` (the process's setting) or a share 0..1."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidInputError(
            f"activation_memory_budget={value!r} is not a share between 0 and 1: give the "
            "fraction of a compiled step's activations its forward may save (torch's "
            "torch._functorch.config.activation_memory_budget: 1.0 saves what inductor's "
            "partitioner chooses, 0.0 recomputes all it can), e.g. 0.5."
        )


def budget_in_effect() -> float:
    """The activation memory budget a compile in this process would use now."""
    import torch._functorch.config as functorch_config

    return float(functorch_config.activation_memory_budget)


@contextmanager
def compiled_with_budget(budget: float | None) -> Iterator[float]:
    """Compiles inside use ``budget`` (``None``: the process's setting); yields the budget in
    effect. The process's setting is restored after."""
    import torch._functorch.config as functorch_config

    if budget is None:
        yield budget_in_effect()
        return
    with functorch_config.patch(activation_memory_budget=float(budget)):
        yield float(budget)


def memory_budget_words(budget: float, given: bool) -> str:
    """A note on an estimate compiled with ``budget`` below 1 (``given``: by the workload,
    else found in the process)."""
    source = (
        "as asked"
        if given
        else "as set in this process (torch._functorch.config.activation_memory_budget)"
    )
    return (
        f"compiled with an activation memory budget of {budget:g} {source}: inductor's "
        "partitioner recomputes activations in backward so that the forward saves at most "
        "that share of what it saves at 1.0"
    )
