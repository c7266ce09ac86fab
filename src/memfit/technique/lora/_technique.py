"""``lora``: its option (a rank, or PEFT's own configuration), the model adapted before the
optimizer is made, and its notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Option, Settings, Technique
from memfit.technique.lora._peft import GivenConfig

if TYPE_CHECKING:
    from torch import nn

__all__ = ["TECHNIQUE", "Lora"]


class Lora(Technique):
    """Low-rank adapters on the model's linear layers (see the package's docstring)."""

    name = "lora"
    option = Option(
        keyword="lora",
        flag="--lora",
        kind=int,
        help="fine-tune with LoRA adapters of rank R on PEFT's default target modules for "
        "the architecture, the base weights frozen (needs peft)",
        aliases=("peft_config",),
    )
    default = None
    kept_in_plans = True
    rank_in_plans = 16  # the rank a plan adds, where the user allows it

    def check(self, value: object) -> Any:
        if isinstance(value, GivenConfig):
            return value
        if _is_peft_config(value):
            return GivenConfig(value)
        if type(value) is not int or value < 1:
            raise InvalidInputError(
                f"lora={value!r} is not a LoRA rank: give the adapters' rank as a whole number "
                ">= 1 (8, 16 and 64 are usual), or a peft.LoraConfig for targets, alpha and "
                "dropout of your own."
            )
        return value

    def prepare(self, value: Any, model: nn.Module, settings: Settings) -> nn.Module:
        from memfit.technique.lora._adapt import adapted

        return adapted(model, value, settings.name)

    def notes(self, value: Any, settings: Settings, optimizer: Any) -> list[str]:
        return [lora_note(value)]

    def words(self, value: Any) -> str:
        return f"LoRA rank {value}" if isinstance(value, int) else "LoRA (PEFT configuration)"

    def axis(self, settings: Settings) -> tuple[Any, ...]:
        return (self.rank_in_plans,) if settings.mode == "train" else ()

    def saving(self, value: Any, trained_elements: int, settings: Settings) -> int:
        # the base's gradients, AdamW's two states and the step's temporaries, at most four
        # parameters' worth of each element (the adapters' own are a rounding error)
        per = 2 if settings.precision in ("bf16", "fp16") else 4
        return trained_elements * per * 4 if value else 0


def lora_note(value: Any) -> str:
    """What the estimate assumed of the adapters."""
    try:
        import peft
    except ImportError:  # the prepare hook has said so by now
        version = "?"
    else:
        version = peft.__version__
    if isinstance(value, int):
        return (
            f"LoRA rank {value} through PEFT {version}'s get_peft_model with its defaults "
            "(the architecture's default target modules, no dropout on the adapters' input, "
            "no bias trained): only the adapters are trained; give a peft.LoraConfig as "
            "techniques={'lora': config} for other targets or a dropout, which saves a mask"
        )
    return f"LoRA through PEFT {version}'s get_peft_model with the configuration given"


def _is_peft_config(value: object) -> bool:
    return type(value).__module__.startswith("peft.") and hasattr(value, "peft_type")


TECHNIQUE = Lora()
