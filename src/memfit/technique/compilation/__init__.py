"""``torch.compile``'d models: finding the compiled parts of a model, estimating them as eager
where the user asks it, and the activation memory budget of a compiled training step.

Its names need torch: they load on first use (``memfit._lazy``)."""

from __future__ import annotations

import typing as _typing

from memfit._lazy import lazy_attributes as _lazy_attributes
from memfit.technique.compilation._technique import TECHNIQUE, MemoryBudget, budget_words

if _typing.TYPE_CHECKING:
    from memfit.technique.compilation._compiled import (
        COMPILED_NOTE,
        check_compiled_setting,
        compiled_as_eager,
        compiled_function,
        compiled_parts,
        compiled_refusal,
        eager_view,
        not_compiled_refusal,
        optimized_module_type,
        whole_model_compiled,
    )
    from memfit.technique.compilation._memory_budget import (
        budget_in_effect,
        check_memory_budget,
        compiled_with_budget,
        memory_budget_words,
    )

_LAZY = {
    "COMPILED_NOTE": "_compiled",
    "check_compiled_setting": "_compiled",
    "compiled_as_eager": "_compiled",
    "compiled_function": "_compiled",
    "compiled_parts": "_compiled",
    "compiled_refusal": "_compiled",
    "eager_view": "_compiled",
    "not_compiled_refusal": "_compiled",
    "optimized_module_type": "_compiled",
    "whole_model_compiled": "_compiled",
    "budget_in_effect": "_memory_budget",
    "check_memory_budget": "_memory_budget",
    "compiled_with_budget": "_memory_budget",
    "memory_budget_words": "_memory_budget",
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = [
    "COMPILED_NOTE",
    "TECHNIQUE",
    "MemoryBudget",
    "budget_in_effect",
    "budget_words",
    "check_compiled_setting",
    "check_memory_budget",
    "compiled_as_eager",
    "compiled_function",
    "compiled_parts",
    "compiled_refusal",
    "compiled_with_budget",
    "eager_view",
    "memory_budget_words",
    "not_compiled_refusal",
    "optimized_module_type",
    "whole_model_compiled",
]
