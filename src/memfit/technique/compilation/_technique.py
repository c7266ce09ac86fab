"""``memory_budget``: torch.compile's activation memory budget through the technique hooks. It
is asked for by the workload's own setting (``activation_memory_budget=``), not by
``techniques=``; its value is the budget, a share between 0 and 1. What a compiled step saves
under it is the trace's capture of inductor's plan (``trace/_compiled_capture.py``); its hooks
say where it would be ignored and set it for a user's live compiled model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfit.technique._base import Option, Place, Settings, Technique, Undo

if TYPE_CHECKING:
    from torch import nn

__all__ = ["TECHNIQUE", "MemoryBudget", "budget_words"]


def budget_words(budget: float) -> str:
    """A compiled model's activation memory budget in words."""
    return f"compiled activation memory budget {budget:g}"


class MemoryBudget(Technique):
    """The activation memory budget (see the module's docstring)."""

    name = "memory_budget"
    option = Option(keyword="memory_budget", flag="", kind=float, help="")
    default = None
    live_on_wrapper = True  # torch.compile's wrapper is what the user's step calls

    given_as = (
        "torch.compile's activation memory budget",
        "activation_memory_budget=SHARE, e.g. 0.5, with a compiled model",
    )

    def given_by(self, settings: Settings) -> Any:
        return settings.activation_memory_budget

    def refusal(self, value: Any, settings: Settings) -> str | None:
        if settings.mode == "infer":
            why = "inference saves no activations for a backward"
        elif settings.compiled == "eager":
            why = "compiled='eager' estimates the uncompiled step, which no partitioner plans"
        elif settings.activation_checkpointing:
            why = (
                "memfit's checkpointing of eager blocks and the compiled partitioner's budget "
                "cannot both be estimated"
            )
        else:
            return None
        return (
            f"activation_memory_budget={value!r} would be ignored here: {why}. It sets what a "
            "torch.compile'd training step's forward saves; drop it, or estimate a compiled "
            "model's training step with it."
        )

    def words(self, value: Any) -> str:
        return budget_words(value)

    def refusal_live(self, value: Any, model: nn.Module) -> str | None:
        from memfit.technique.compilation._compiled import compiled_parts, whole_model_compiled

        if whole_model_compiled(model, compiled_parts(model)):
            return None
        return (
            f"The plan sets torch.compile's activation memory budget to {value:g}, but "
            f"{type(model).__name__} is not compiled as a whole with torch.compile, so the "
            "budget would be ignored; nothing was changed. Apply the plan to "
            "torch.compile(model), as it was planned."
        )

    def live_words(self, value: Any, model: nn.Module) -> str:
        return (
            f"torch.compile's activation memory budget {value:g} (the process's setting; "
            "the compiled model recompiles at its next call)"
        )

    def apply(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Undo:
        """Set for the process (it is ``torch._functorch.config``'s, read at each compile),
        the compiled caches reset so that the model's next call compiles with it; the undo
        puts the setting back and resets them again."""
        import torch._dynamo
        import torch._functorch.config as functorch_config

        from memfit.technique.compilation._memory_budget import budget_in_effect

        before = budget_in_effect()
        functorch_config.activation_memory_budget = value
        torch._dynamo.reset()

        def undo() -> None:
            functorch_config.activation_memory_budget = before
            torch._dynamo.reset()

        return undo


TECHNIQUE = MemoryBudget()
