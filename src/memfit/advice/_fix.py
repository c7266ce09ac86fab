"""The vocabulary of advice: a :class:`Change` to a setting, a :class:`Fix` that says what it
saves and how to make it, and :func:`rank` (largest expected saving first).

A fix's ``change`` is the setting a planner can apply (a keyword of ``memfit.estimate``, or
``allocator_config`` for ``PYTORCH_CUDA_ALLOC_CONF``); ``how`` is what a person types. The
report's JSON (:meth:`Fix.to_dict`) keeps the fields a reader needs and leaves ``change`` out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Change", "Fix", "How", "covers", "rank"]

How = tuple[str, str]  # (where, code): where to put it ("" for a plain command), what to write


@dataclass(frozen=True, slots=True)
class Change:
    """One setting and its new value, as ``memfit.estimate`` spells it.

    ``setting`` is a keyword of ``memfit.estimate`` (``precision``, ``optimizer``,
    ``activation_checkpointing``, ``allocator_config``) or ``microbatches``: the number of
    micro-batches the batch is split into (gradients accumulated over them in training).
    """

    setting: str
    value: str | int | float | bool


@dataclass(frozen=True, slots=True)
class Fix:
    """One way to avoid running out of memory. ``saving`` is in bytes; ``None`` when it cannot
    be estimated.

    ``basis`` says where the saving comes from (a replay, a measured factor, an upper bound);
    ``covers`` whether it is at least the shortfall of the failed allocation (``None`` when
    either is unknown); ``how`` the concrete settings and commands, as ``(where, code)`` pairs
    (``where`` is empty for a shell command or plain Python); ``change`` the same as a setting,
    where there is one.
    """

    name: str
    saving: int | None
    basis: str
    covers: bool | None
    how: tuple[How, ...]
    cost: str
    change: Change | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "saving": self.saving,
            "basis": self.basis,
            "covers_shortfall": self.covers,
            "how": [{"where": where, "code": code} for where, code in self.how],
            "cost": self.cost,
        }


def covers(saving: int | None, shortfall: int) -> bool | None:
    """Whether ``saving`` makes up the ``shortfall``; ``None`` when either is unknown."""
    if saving is None or shortfall <= 0:
        return None
    return saving >= shortfall


def rank(fixes: Iterable[Fix | None]) -> list[Fix]:
    """The fixes given (``None`` left out), largest expected saving first, the ones whose saving
    is unknown last; ties keep their order."""
    kept = [f for f in fixes if f is not None]
    kept.sort(key=lambda f: (f.saving is None, -(f.saving or 0)))
    return kept
