"""``eight_bit``: bitsandbytes' 8-bit optimizer states, asked for by the optimizer's name
(``adamw-8bit``), and its note."""

from __future__ import annotations

import sys
from typing import Any

from memfit._errors import InvalidInputError
from memfit.technique._base import Settings
from memfit.technique._variant import OptimizerVariant, element_bytes

__all__ = ["EIGHT_BIT", "TECHNIQUE", "EightBit"]

EIGHT_BIT = "8bit"  # the optimizer names' suffix: "adamw-8bit"
SUFFIX = "-" + EIGHT_BIT


class EightBit(OptimizerVariant):
    """Adam's two states a byte per element (see the package's docstring)."""

    name = "eight_bit"
    suffix = SUFFIX
    searched_words = "8-bit optimizer states"

    def offered(self, family: str, settings: Settings) -> tuple[str, ...]:
        """Adam's and AdamW's 8-bit states where bitsandbytes is installed, except for FSDP2
        (bitsandbytes cannot step its DTensor shards)."""
        from memfit.technique.eight_bit._bnb import eight_bit_available

        if family in ("adam", "adamw") and eight_bit_available() and settings.strategy != "fsdp2":
            return (family + SUFFIX,)
        return ()

    def saving(self, value: Any, trained_elements: int, settings: Settings) -> int:
        """What 8-bit states save against Adam's two full states: a byte per element each (and
        a float32 scale per 256) instead of four (fp32 and mixed precision) or two (pure
        bf16/fp16). None at fp16-mixed: bitsandbytes' optimizers beside GradScaler are not
        planned."""
        if settings.precision == "fp16-mixed":
            return 0
        n = trained_elements
        return n * 2 * (element_bytes(settings.precision) - 1) - n * 2 * 4 // 256

    def state_bytes(self, value: str, param_bytes: int) -> int:
        return 1  # a byte per element (its scales left out: a floor)

    def make_optimizer(self, value: str, params: Any) -> Any:
        from memfit.technique.eight_bit._bnb import eight_bit_class

        return eight_bit_class(value)(params, lr=1e-4)

    def check_live(self, value: str, optimizer: Any) -> None:
        """The user's own bitsandbytes optimizer runs the states as built: memfit cannot turn
        another optimizer's class into it in place."""
        from memfit.technique.eight_bit._bnb import eight_bit_class

        wanted = eight_bit_class(value)  # a clear error when bitsandbytes is not installed
        if not isinstance(optimizer, wanted):
            raise InvalidInputError(
                f"The plan keeps the optimizer's states in 8 bits ({value}), which takes "
                f"bitsandbytes' {wanted.__name__}; the optimizer given is "
                f"{type(optimizer).__name__}. Build bitsandbytes.optim.{wanted.__name__}"
                "(model.parameters(), ...) and apply the plan to it, or plan without 8-bit "
                "states (optimizers=[...] naming others); nothing was changed."
            )

    def notes(self, value: Any, settings: Settings, optimizer: Any) -> list[str]:
        """Which 8-bit optimizer the estimate traced, and its package's version."""
        cls = type(optimizer)
        package = cls.__module__.partition(".")[0]
        version = getattr(sys.modules.get(package), "__version__", "?")
        return [f"8-bit optimizer states: {package} {version}'s {cls.__name__}, as traced"]

    def words(self, value: Any) -> str:
        return "8-bit optimizer states"


TECHNIQUE = EightBit()
