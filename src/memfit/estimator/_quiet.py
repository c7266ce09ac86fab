"""Library chatter kept out of memfit's output while a model is built and traced.

Model libraries log notes about the user's configuration on every build (transformers 5:
"`loss_type=None` was set in the config but it is unrecognized" for GPT-2) and raise
deprecation warnings; they concern the model code, not the estimate, and repeat on every run.
Errors still pass: the loggers are held at ERROR, and exceptions are untouched.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["LIBRARY_LOGGERS", "quiet_libraries"]

#: The loggers of the model libraries memfit builds models from.
LIBRARY_LOGGERS = ("transformers", "timm", "torchvision", "accelerate", "DeepSpeed")


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """Hold the model libraries' loggers at ERROR and ignore Python warnings, then restore."""
    loggers = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
