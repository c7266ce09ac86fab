"""``in_backward``: the optimizer stepped in backward, asked for by the optimizer's name
(``adamw-in-backward``): what it cannot go with, and its note."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Place, Settings, Undo
from memfit.technique._variant import OptimizerVariant, check_fusable, element_bytes

__all__ = ["IN_BACKWARD", "IN_BACKWARD_NOTE", "TECHNIQUE", "InBackward", "in_backward"]

IN_BACKWARD = "in-backward"  # the optimizer names' suffix: "adamw-in-backward"
SUFFIX = "-" + IN_BACKWARD

IN_BACKWARD_NOTE = (
    "the optimizer stepped each parameter in backward, one fused update as its gradient was "
    "complete, and freed the gradient then"
)


def in_backward(name: object) -> bool:
    """Whether an optimizer name (``adamw-in-backward``) steps in backward."""
    return isinstance(name, str) and name.endswith(SUFFIX)


class InBackward(OptimizerVariant):
    """Each parameter stepped, and its gradient freed, as backward completes it."""

    name = "in_backward"
    suffix = SUFFIX
    steps_in_backward = True
    accumulates = False  # each micro-batch's backward steps: a plan tries the whole batch
    searched_words = "the optimizer stepped in backward"
    changes_live = True

    def offered(self, family: str, settings: Settings) -> tuple[str, ...]:
        return (family + SUFFIX,)  # memfit steps any family in backward, fused where it can

    def saving(self, value: Any, trained_elements: int, settings: Settings) -> int:
        """At most the gradients, which it frees as it steps (none at fp16-mixed, which it
        cannot go with: the scaler checks every gradient first)."""
        if settings.precision == "fp16-mixed":
            return 0
        return trained_elements * element_bytes(settings.precision)

    def refusal(self, value: Any, settings: Settings) -> str | None:
        name = settings.optimizer
        family = str(name).removesuffix(SUFFIX)
        if settings.accumulation > 1:
            return (
                f"optimizer={name!r} steps each parameter as soon as backward has its gradient, "
                f"so gradients cannot add up over accumulation={settings.accumulation} "
                f"micro-batches: give accumulation=1, or optimizer='{family}-fused' to accumulate."
            )
        if settings.precision == "fp16-mixed":
            return (
                f"optimizer={name!r} cannot run with precision='fp16-mixed': the GradScaler must "
                "unscale and check every gradient for inf before any parameter is stepped. Give "
                f"precision='bf16-mixed' (no scaler), or optimizer='{family}-fused'."
            )
        if settings.step_fn is not None:
            return (
                f"optimizer={name!r} is memfit's loop stepping in backward; a step function of "
                "your own calls the optimizer itself. Register the hooks in your step (torch's "
                "register_post_accumulate_grad_hook) and pass the optimizer factory you use."
            )
        return None

    def optimizer_flags(self, value: str) -> dict[str, Any]:
        return {"fused": True}  # a fused update per parameter

    def check_live(self, value: str, optimizer: Any) -> None:
        """memfit steps SGD, Adam and AdamW in backward, each update fused."""
        import torch

        if not isinstance(optimizer, (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)):
            raise InvalidInputError(
                f"The plan steps the optimizer in backward ({value}), which memfit does for "
                f"SGD, Adam and AdamW only; {type(optimizer).__name__} is not one of them. Plan "
                "with optimizers=[...] naming variants that step after backward; nothing was "
                "changed."
            )
        check_fusable(optimizer, value)

    def apply(self, value: Any, model: Any, optimizer: Any, place: Place) -> Undo:
        """The user's optimizer stepped in backward until the returned undo takes the hooks
        off; its own state and groups are used, so its ``state_dict`` and an LR scheduler on
        it work as before."""
        from memfit.technique.in_backward._stepper import OptimizerInBackward

        return OptimizerInBackward(optimizer).remove

    def stepping(
        self, value: Any, optimizer: Any, around: Callable[..., None]
    ) -> AbstractContextManager[Any]:
        return _stepped_in_backward(optimizer, around)

    def notes(self, value: Any, settings: Settings, optimizer: Any) -> list[str]:
        return [IN_BACKWARD_NOTE]

    def words(self, value: Any) -> str:
        name = value if isinstance(value, str) else "stepped in backward"
        return f"optimizer {name}: each parameter stepped (fused) as backward completes it"


@contextmanager
def _stepped_in_backward(optimizer: Any, around: Callable[..., None]) -> Iterator[None]:
    """The optimizer's parameters stepped in backward while the steps run."""
    from memfit.technique.in_backward._stepper import OptimizerInBackward

    stepper = OptimizerInBackward(optimizer, around=around)
    try:
        yield
    finally:
        stepper.remove()


TECHNIQUE = InBackward()
