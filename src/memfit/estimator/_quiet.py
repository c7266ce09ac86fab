"""Library chatter kept out of memfit's output while a model is built and traced.

Model libraries log notes about the user's configuration on every build (transformers 5:
"`loss_type=None` was set in the config but it is unrecognized" for GPT-2, "`use_cache=True`
is incompatible with gradient checkpointing") and raise deprecation warnings; they concern the
model code, not the estimate, and repeat on every run. Errors still pass: the loggers are held
at ERROR, and exceptions are untouched.

A library may set its own logger's level while it is held: transformers sets its default
(WARNING) when it is first imported, which happens inside the hold when a model name imports
it. That level is kept aside, not applied, and becomes the logger's level when the hold ends,
so the logger is left as the library (or the user) set it, and a level the user had set before
is restored. Processes forked meanwhile (the planner's workers) inherit the hold.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LIBRARY_LOGGERS", "quiet_libraries"]

#: The loggers of the model libraries memfit builds models from, and the libraries it loads
#: for them (8-bit optimizer states, adapters, the hub's kernels).
LIBRARY_LOGGERS = (
    "transformers",
    "timm",
    "torchvision",
    "accelerate",
    "DeepSpeed",
    "bitsandbytes",  # 8-bit optimizer states: its CPU backend warns when it loads
    "peft",
    "huggingface_hub",
)


class _Hold:
    """One library logger held at ERROR until :meth:`release`; a level set on it meanwhile
    is recorded instead of applied, and applied on release."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.level = logger.level
        self.requested: int | None = None
        self.outer = logger.__dict__.get("setLevel")  # an enclosing hold's, when nested
        logging.Logger.setLevel(logger, logging.ERROR)
        logger.setLevel = self._record  # type: ignore[method-assign]

    def _record(self, level: int | str) -> None:
        """``logger.setLevel(level)`` while held: checked as logging checks it, kept aside."""
        logging.Logger.setLevel(self.logger, level)  # a bad level raises here, as it would
        self.requested = self.logger.level
        logging.Logger.setLevel(self.logger, logging.ERROR)

    def release(self) -> None:
        """The logger's own ``setLevel`` back, and its level: the one set while held, or the
        one it had (an enclosing hold records the former in turn)."""
        if self.outer is None:
            del self.logger.setLevel
        else:
            self.logger.setLevel = self.outer  # type: ignore[method-assign]
        if self.requested is None:
            logging.Logger.setLevel(self.logger, self.level)
        else:
            self.logger.setLevel(self.requested)


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Hold the model libraries' loggers at ERROR and ignore Python warnings, then restore
    the loggers' levels (those the libraries set meanwhile, else those they had)."""
    holds = [_Hold(logging.getLogger(name)) for name in LIBRARY_LOGGERS]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for hold in reversed(holds):
            hold.release()
