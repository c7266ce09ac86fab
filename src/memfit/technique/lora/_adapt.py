"""The model adapted by PEFT, with PEFT's refusals turned into memfit's."""

from __future__ import annotations

from typing import Any

from torch import nn

from memfit._errors import InvalidInputError
from memfit.technique.lora._peft import GivenConfig, require_peft

__all__ = ["adapted"]


def adapted(model: nn.Module, value: Any, name: str) -> nn.Module:
    """``model`` with LoRA adapters: a rank on PEFT's default targets for its architecture, or
    the user's ``peft.LoraConfig``."""
    peft = require_peft()
    if isinstance(value, GivenConfig):
        config = value.config
    else:
        config = _default_config(peft, model, value, name)
    try:
        return peft.get_peft_model(model, config)  # type: ignore[no-any-return]
    except ValueError as err:
        if "target modules" not in str(err).lower() and "target_modules" not in str(err):
            raise
        raise InvalidInputError(
            f"LoRA's target modules are not in {name}: {err} Its linear layers are named "
            f"{_linear_names(model)}; give peft.LoraConfig(target_modules=[...]) with some of "
            "them as techniques={'lora': config}."
        ) from err


def _default_config(peft: Any, model: nn.Module, rank: int, name: str) -> Any:
    """PEFT's defaults at ``rank``: its target modules for the model's architecture (a
    transformers model's ``config.model_type``)."""
    mapping = peft.utils.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in mapping:
        what = f"its architecture {model_type!r}" if model_type else "a non-transformers model"
        raise InvalidInputError(
            f"lora={rank} needs target modules for {name}: PEFT has no defaults for {what}. "
            f"Its linear layers are named {_linear_names(model)}; give "
            "techniques={'lora': peft.LoraConfig(r=..., target_modules=[...])}."
        )
    task = "CAUSAL_LM" if type(model).__name__.endswith("ForCausalLM") else None
    return peft.LoraConfig(r=rank, target_modules=list(mapping[model_type]), task_type=task)


def _linear_names(model: nn.Module, shown: int = 6) -> str:
    """The distinct last names of the model's linear layers, a few of them."""
    names = sorted(
        {n.rpartition(".")[2] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    )
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more if names else "(none)"
