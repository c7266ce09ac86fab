"""``quantize``: its option, the model's linear layers replaced before the optimizer is made,
and its notes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Option, Settings, Technique

if TYPE_CHECKING:
    from torch import nn

__all__ = ["KINDS", "TECHNIQUE", "Quantize"]

KINDS = ("nf4", "fp4", "int8")  # bitsandbytes' 4-bit data types and LLM.int8


class Quantize(Technique):
    """4-bit or 8-bit base weights (see the package's docstring)."""

    name = "quantize"
    option = Option(
        keyword="quantize",
        flag="--quantize",
        kind=str,
        help="the linear layers' weights in 4 bits (nf4 or fp4) or 8 bits (int8, LLM.int8) by "
        "bitsandbytes, frozen, as QLoRA loads them; with --lora, QLoRA",
    )
    default = None
    kept_in_plans = True
    needs = ("lora",)  # a plan adds 4-bit weights under adapters only: QLoRA

    def check(self, value: object) -> Any:
        if value not in KINDS:
            raise InvalidInputError(
                f"quantize={value!r} is not a data type memfit quantizes to: give 'nf4' "
                "(QLoRA's 4-bit NormalFloat), 'fp4' or 'int8' (LLM.int8)."
            )
        return value

    def refusal(self, value: Any, settings: Settings) -> str | None:
        if settings.strategy is not None:
            return (
                f"quantize={value!r} cannot go with strategy={settings.strategy!r}: memfit "
                "estimates quantized weights on one GPU. Drop one of them."
            )
        return None

    def prepare(self, value: Any, model: nn.Module, settings: Settings) -> nn.Module:
        from memfit.technique.quantize._replace import quantized

        return quantized(model, value, settings.precision)

    def notes(self, value: Any, settings: Settings, optimizer: Any) -> list[str]:
        from memfit.technique.quantize._replace import quantize_note

        return [quantize_note(value, settings.precision)]

    def words(self, value: Any) -> str:
        return f"weights in {value}"

    def axis(self, settings: Settings) -> tuple[Any, ...]:
        return ("nf4",) if settings.mode == "train" else ()

    def saving(self, value: Any, trained_elements: int, settings: Settings) -> int:
        # at most every weight from its precision's bytes to half a byte (4 bits) or one byte
        per = 2 if settings.precision in ("bf16", "fp16") else 4
        return trained_elements * (per - 1 if value == "int8" else per) if value else 0


TECHNIQUE = Quantize()
