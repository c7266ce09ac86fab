"""8-bit optimizer states: bitsandbytes' Adam8bit and AdamW8bit, the optional extra
``memfit[eightbit]``.

Each of Adam's two states is kept as one byte per element (block-wise quantized, with a float32
scale per block of 256) instead of four: AdamW's state of a 7B model falls from 54 GB in fp32
to about 14 GB. Parameters under 4096 elements keep 32-bit states, as bitsandbytes decides.
memfit traces bitsandbytes' own step (its kernels have fake implementations), so the estimate is
what the installed version allocates. It changes the optimizer's arithmetic, as a precision
does: the planner names it among its changes.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from memfit._errors import MissingExtraError

__all__ = ["eight_bit_available", "eight_bit_class"]


def eight_bit_class(name: str) -> Any:
    """bitsandbytes' optimizer class for ``adam-8bit`` or ``adamw-8bit``."""
    try:
        import bitsandbytes
    except ImportError as err:
        raise MissingExtraError(
            "bitsandbytes", f"The optimizer {name} (8-bit states)", "eightbit"
        ) from err
    optim: Any = bitsandbytes.optim
    return optim.AdamW8bit if name.startswith("adamw") else optim.Adam8bit


def eight_bit_available() -> bool:
    """Whether bitsandbytes is installed here (the planner searches 8-bit states only then).
    Found, not imported: its import takes seconds (it loads torch's compiler), and a plan that
    traces no 8-bit candidate does not need it; one that does and cannot import it gets the
    install hint of :func:`eight_bit_class`."""
    if "bitsandbytes" in sys.modules:
        return sys.modules["bitsandbytes"] is not None  # None: an import made to fail
    try:
        return importlib.util.find_spec("bitsandbytes") is not None
    except (ImportError, ValueError):
        return False
