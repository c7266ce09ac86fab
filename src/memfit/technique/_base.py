"""What a technique is to the rest of memfit: its option and the hooks the step loop, the trace,
the planner and the runtime call. A technique overrides the hooks it needs; the others do
nothing.

A technique sits below the workload, so it never imports it: the hooks read the other
settings of a step through :class:`Settings`, which :class:`memfit.workload.Workload`
satisfies, and act on memory through a :class:`Place`, which the trace (fake tensors, host
allocations unrecorded) and a real GPU run each provide.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from memfit._errors import InvalidInputError

if TYPE_CHECKING:  # importing a technique imports no torch: the command line lists them
    import torch
    from torch import nn

__all__ = ["CopyObserver", "Option", "Place", "Settings", "StepFacts", "Technique", "Undo"]

Undo = Callable[[], None]  # what apply() returns: puts the model and optimizer back


@dataclass(frozen=True)
class Option:
    """A technique's setting as users give it: ``techniques={keyword: value}`` in Python,
    ``flag`` on the command line (a switch when ``kind`` is bool); each of ``aliases`` is a
    keyword of its own beside the workload's settings that means the same (``peft_config=``)."""

    keyword: str
    flag: str  # "": no flag of its own (a technique another setting asks for)
    kind: type
    help: str
    aliases: tuple[str, ...] = ()


class Settings(Protocol):
    """The settings of a step a technique's hooks may read (a ``Workload`` has them)."""

    @property
    def name(self) -> str: ...
    @property
    def mode(self) -> str: ...
    @property
    def precision(self) -> str: ...
    @property
    def optimizer(self) -> Any: ...
    @property
    def strategy(self) -> str | None: ...
    @property
    def step_fn(self) -> Any: ...
    @property
    def accumulation(self) -> int: ...
    @property
    def activation_checkpointing(self) -> bool | str | float: ...
    @property
    def enable_checkpointing(self) -> Any: ...
    @property
    def activation_memory_budget(self) -> float | None: ...
    @property
    def compiled(self) -> str | None: ...
    @property
    def offload(self) -> float: ...
    @property
    def offload_checkpoints(self) -> bool: ...
    @property
    def techniques(self) -> tuple[tuple[str, Any], ...]: ...


class CopyObserver(Protocol):
    """What a trace is told of the copies between the GPU and the host that a technique issues
    on a side stream, which fake tensors do not run: each copy, the side stream's events, the
    compute stream's waits on them, and the tensors a copy back lands in."""

    def copied(self, direction: str, nbytes: int) -> None:
        """``direction`` ``"d2h"`` or ``"h2d"``: one copy of ``nbytes`` issued on the side
        stream, after everything the compute stream had issued."""

    def marked(self, event: int) -> None:
        """The side stream's copies so far are ``event``."""

    def waited(self, event: int) -> None:
        """The compute stream waits for ``event``."""

    def fetched(self, t: torch.Tensor) -> None:
        """``t`` was allocated to take a saved tensor back."""


class Place(Protocol):
    """Where a technique's tensors live: the host beside the GPU. In a trace, host tensors are
    fake and their allocations are not GPU memory; on a real GPU they are pinned CPU memory."""

    def host_empty_like(self, t: torch.Tensor) -> torch.Tensor:
        """An empty tensor shaped and typed as ``t`` in host memory, pinned."""
        ...

    def on_host(self) -> AbstractContextManager[Any]:
        """Ops run while this lasts run on host tensors (their temporaries are not GPU
        memory)."""
        ...

    def synchronize(self) -> None:
        """Wait for the GPU's copies to and from the host."""
        ...

    def copies(self, words: Callable[[int], str]) -> CopyObserver | None:
        """An observer of a technique's side-stream copies where they are not run (a trace),
        whose note for the estimate is ``words`` of the most pinned host memory they held at
        once; None where the copies are real."""
        ...


@dataclass(frozen=True)
class StepFacts:
    """What the planner's step-time model knows of a step, for a technique's time."""

    trained_elements: int  # parameter elements that require a gradient
    param_bytes: int  # bytes per element of a trained parameter
    # seconds to copy bytes between pinned host memory and the GPU, by direction ("d2h", "h2d")
    copy_seconds: Callable[[str, int], float]


class Technique:
    """One way of trading speed for memory, all in one package. ``name`` is how plans and
    notes call it; ``option`` how users ask for it; ``default`` its value when not asked."""

    name: str = ""
    option: Option
    default: Any = None
    # it changes what is trained (LoRA, 4-bit weights): a plan keeps the user's value on every
    # candidate and adds it (at its ``axis``) only where the user allows it; memfit.apply
    # leaves it to the user's own model
    kept_in_plans: bool = False
    # its live change acts on the model as the user holds it (torch.compile's wrapper), not on
    # the module inside
    live_on_wrapper: bool = False
    # the techniques a plan adds this one beside only, never alone (4-bit weights: alone they
    # would leave the linear layers untrained)
    needs: tuple[str, ...] = ()

    # a technique asked for by settings of its own (``given_by``), not by ``techniques=``:
    # what it is and the settings to give, for the refusal of ``techniques={keyword: ...}``
    given_as: tuple[str, str] = ("", "")

    def check(self, value: object) -> Any:
        """``value`` as given, checked and normalized; raises ``InvalidInputError``."""
        what, give = self.given_as
        if what:
            raise InvalidInputError(
                f"techniques={{{self.option.keyword!r}: {value!r}}}: {what} is asked for by "
                f"its own setting; give {give}."
            )
        return value

    def given_by(self, settings: Settings) -> Any:
        """The technique's value where another setting asks for it (an optimizer variant's
        name: ``adamw-in-backward``), else its default: how ``techniques=`` gives it aside."""
        return self.default

    def refusal(self, value: Any, settings: Settings) -> str | None:
        """Why ``value`` cannot go with the other settings (one paragraph), or None."""
        return None

    def refusal_compiled(self, value: Any) -> str | None:
        """Why ``value`` cannot be estimated for a model ``torch.compile`` compiles as a whole
        (found only when the trace meets it), or None."""
        return None

    def prepare(self, value: Any, model: nn.Module, settings: Settings) -> nn.Module:
        """The model the steps train, made of the one built (on the GPU, or the trace's fake
        one), before its optimizer is made; as it is by default."""
        return model

    def engage(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Any:
        """Act on the model and its optimizer before the first step, as the step loop does on
        a GPU and in a trace; returns the optimizer the steps use."""
        return optimizer

    def stepping(
        self, value: Any, optimizer: Any, around: Callable[..., None]
    ) -> AbstractContextManager[Any]:
        """What memfit's step loop runs its steps inside, on a GPU and in a trace (``around``
        wraps one parameter's update where the technique steps parameters itself); nothing by
        default."""
        return nullcontext()

    def host_bytes(self, value: Any, optimizer: Any) -> int:
        """Host memory the technique holds once steps have run (0: none)."""
        return 0

    def notes(self, value: Any, settings: Settings, optimizer: Any) -> list[str]:
        """What an estimate with the technique assumed, for its notes (``optimizer``: the
        steps' optimizer once they have run)."""
        return []

    def words(self, value: Any) -> str:
        """The technique at ``value`` in a plan's one-line description."""
        return self.name

    def axis(self, settings: Settings) -> tuple[Any, ...]:
        """The values the planner tries besides the default for ``settings`` (none: not
        searched; a technique kept in plans: the values it is added at where allowed)."""
        return ()

    def saving(self, value: Any, trained_elements: int, settings: Settings) -> int:
        """At most what ``value`` saves of a step's GPU memory: the planner tries it only
        where that could make a step fit."""
        return 0

    def step_seconds(self, value: Any, facts: StepFacts) -> float:
        """Seconds ``value`` adds to a step (what the GPU then waits for)."""
        return 0.0

    def refusal_live(self, value: Any, model: nn.Module) -> str | None:
        """Why ``value`` cannot be applied to the user's live ``model`` (one paragraph, said
        before ``memfit.apply`` changes anything), or None."""
        return None

    def live_words(self, value: Any, model: nn.Module) -> str:
        """What applying ``value`` to the user's live ``model`` does, in words (what
        ``PlannedStep.changes`` says); by default :meth:`words`."""
        return self.words(value)

    def apply(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Undo:
        """Do it to a user's live model and optimizer; returns what undoes it."""
        raise NotImplementedError(f"{self.name} cannot be applied to a live model")
