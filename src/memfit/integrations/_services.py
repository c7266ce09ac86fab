"""What both framework callbacks run beside the training loop: OOM reports and leak checks."""

from __future__ import annotations

import logging
import os

from memfit.oom import OOMHook, oom_report
from memfit.report import oom_markdown
from memfit.runtime import LeakDetector, LeakReport

__all__ = ["Services"]

logger = logging.getLogger("memfit.integrations")


class Services:
    """An OOM report hook and a leak detector, started and stopped with the training run.

    ``oom_dir``: where out-of-memory reports go (``None``: no reports). ``leak_detector``:
    ``True`` for a default :class:`memfit.runtime.LeakDetector`, an instance to configure it,
    ``False`` for none.
    """

    def __init__(
        self, oom_dir: str | os.PathLike[str] | None, leak_detector: bool | LeakDetector
    ) -> None:
        self.oom_dir = oom_dir
        self._leak_option = leak_detector
        self.oom: OOMHook | None = None
        self.leaks: LeakDetector | None = None

    def start(self) -> None:
        if self.oom_dir is not None and self.oom is None:
            self.oom = oom_report(self.oom_dir, render=oom_markdown)
        if self.leaks is None and self._leak_option is not False:
            option = self._leak_option
            self.leaks = option if isinstance(option, LeakDetector) else LeakDetector()

    def step(self) -> LeakReport | None:
        """Once per optimizer step; a report when memory has grown ``window`` steps in a row."""
        return self.leaks.step() if self.leaks is not None else None

    def stop(self) -> None:
        if self.oom is not None:
            self.oom.close()
            self.oom = None
        if self.leaks is not None:
            self.leaks.close()
