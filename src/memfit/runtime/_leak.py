"""``memfit.LeakDetector``: notice memory that grows step after step, and say what grows.

Call :meth:`LeakDetector.step` once per training step, at the same point of each step (after
``optimizer.zero_grad()`` is best). It reads the memory allocated on the device:
``torch.cuda.memory_allocated()`` on CUDA, the ledger's live bytes on the CPU (PyTorch keeps no
count there; see :mod:`memfit.runtime._leak_ledger`).

**The rule.** A step *grows* when its reading exceeds the previous one by at least
``min_growth`` and is a new high by at least that much. A batch size or sequence length that
varies makes memory go up and down, but it does not set a new high step after step, so it does
not look like a leak; a leak does. After ``window`` growing steps in a row the detector builds
a :class:`LeakReport`, logs it on ``logging.getLogger("memfit.leak")`` and hands it to
``on_leak``, then starts counting again.

**What grows.** From the first growing step on, the detector notes where each new storage
comes from (the ledger, a dispatch mode: on CUDA it runs only from then on). The report
groups the storages that appeared during the growing steps, are older than the last step and
are still alive, by site (the innermost frame outside torch) and by the user code that called
it, with their shapes and dtypes; and it names the loop's variables that hold such tensors.
"""

from __future__ import annotations

import itertools
import json
import logging
import sys
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

import torch

from memfit._errors import InvalidInputError
from memfit._units import MiB, format_bytes, parse_size
from memfit.runtime._leak_holders import LeakHolder, find_holders
from memfit.runtime._leak_ledger import Entry, Ledger

__all__ = ["LeakDetector", "LeakReport", "LeakSite"]

logger = logging.getLogger("memfit.leak")
_TOP_SITES = 10


@dataclass(frozen=True)
class LeakSite:
    """New live storages created at one place."""

    site: str  # innermost frame outside torch: "models/gpt2.py:120 in forward"
    caller: str  # innermost frame of user code that led there ("" if none)
    count: int
    bytes: int
    shapes: list[tuple[str, str, int]]  # (shape, dtype, count), most common first


@dataclass(frozen=True)
class LeakReport:
    """A run of steady growth, what grew, and who holds it. Sizes are int bytes."""

    device: str
    step: int  # steps seen when it was reported
    window: int
    growth: list[int]  # bytes added by each step of the window
    allocated: int  # bytes allocated at the last step
    sites: list[LeakSite] = field(default_factory=list)
    callers: list[tuple[str, int, int]] = field(default_factory=list)  # (line, count, bytes)
    holders: list[LeakHolder] = field(default_factory=list)

    @property
    def total_growth(self) -> int:
        return sum(self.growth)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["units"] = "bytes"
        data["total_growth"] = self.total_growth
        return data

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = [
            f"Memory on {self.device} grew for {self.window} steps in a row (to step "
            f"{self.step}): +{format_bytes(self.total_growth)}, "
            f"{format_bytes(self.total_growth // max(1, self.window))} a step, "
            f"{format_bytes(self.allocated)} allocated now."
        ]
        for line, count, nbytes in self.callers[:3]:
            lines.append(f"  {format_bytes(nbytes)} in {count} tensors created under {line}")
        for s in self.sites[:5]:
            shapes = ", ".join(f"{n} x {shape} {dtype}" for shape, dtype, n in s.shapes[:3])
            via = f" (called from {s.caller})" if s.caller and s.caller != s.site else ""
            lines.append(
                f"  {format_bytes(s.bytes)} in {s.count} tensors from {s.site}{via}: {shapes}"
            )
        lines += [f"  held by {h.describe()}" for h in self.holders[:3]]
        if any(h.grad_fn for h in self.holders):
            lines.append(
                "  A tensor that keeps grad_fn keeps its graph and saved activations: keep "
                "loss.item() or loss.detach() instead."
            )
        return "\n".join(lines)


class LeakDetector:
    """Watch allocated memory step by step and report steady growth with its sites.

    ``window``: growing steps in a row that make a leak (at least 2). ``min_growth``: bytes
    (or a size such as ``"1MiB"``) a step must add to count. ``on_leak``: called with each
    report. ``sites``: note allocation sites (turn off for the growth check alone). ``device``:
    ``"cuda"`` (default where available) or ``"cpu"``.
    """

    def __init__(
        self,
        *,
        window: int = 5,
        min_growth: int | str = MiB,
        on_leak: Callable[[LeakReport], None] | None = None,
        sites: bool = True,
        device: str | torch.device | None = None,
    ) -> None:
        if on_leak is not None and not callable(on_leak):
            raise InvalidInputError(
                f"on_leak={on_leak!r} is not callable: give a function of one LeakReport, "
                "e.g. on_leak=print, or leave it out to keep the reports in .reports."
            )
        if type(window) is not int or window < 2:
            raise InvalidInputError(
                f"window={window!r} is not accepted: the detector needs a whole number of steps "
                "to tell growth from a single jump; give an int of 2 or more, e.g. window=5."
            )
        self.window = window
        if not isinstance(min_growth, (int, str)):
            raise InvalidInputError(
                f"min_growth={min_growth!r} is not a size: give bytes (an int) or a size "
                "such as '1MiB'."
            )
        self.min_growth = parse_size(min_growth)
        self.on_leak = on_leak
        self.sites = sites
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type not in ("cuda", "cpu"):
            raise InvalidInputError(f"device={device!r}: give 'cuda' or 'cpu'.")
        self.readings: list[int] = []
        self.reports: list[LeakReport] = []
        self._ledger = Ledger(self.device.type)
        self._run = 0  # growing steps in a row
        self._high = 0

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> LeakDetector:
        if self.device.type == "cpu":
            self._ledger.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop watching: remove the dispatch mode (if active) and forget the ledger."""
        self._ledger.stop()
        self._ledger.clear()

    # -- the per-step check -----------------------------------------------------------------
    def allocated(self) -> int:
        """Bytes allocated on the device now, as the detector counts them."""
        if self.device.type == "cuda":
            return int(torch.cuda.memory_allocated(self.device))
        return self._ledger.live_bytes

    def step(self) -> LeakReport | None:
        """Record one step; returns a report when this step completes a run of growth."""
        if self.device.type == "cpu" and not self._ledger.active:
            self._ledger.start()
        reading = self.allocated()
        previous = self.readings[-1] if self.readings else None
        self.readings.append(reading)
        grows = (
            previous is not None
            and reading >= previous + self.min_growth
            and reading >= self._high + self.min_growth
        )
        self._high = max(self._high, reading)
        self._run = self._run + 1 if grows else 0
        self._ledger.step = len(self.readings)
        report = None
        if self._run >= self.window:
            report = self._report(sys._getframe(1))
            self._run = 0
        if self.sites and self._run:
            self._record(True)
        elif self._ledger.sites or report is not None:
            self._record(False)
        return report

    def _record(self, on: bool) -> None:
        self._ledger.sites = on
        if self.device.type == "cuda":
            if on:
                self._ledger.start()
            else:
                self._ledger.stop()
                self._ledger.clear()

    def _report(self, caller: Any) -> LeakReport:
        now = len(self.readings)
        # storages made by the growing steps (tagged with the call before them), less the
        # last step's: what the loop still holds from its latest step is not a leak yet
        live = [(k, e) for k, e in list(self._ledger.live.items())]
        kept = {k: e for k, e in live if now - self.window <= e.step < now - 1}

        def is_new(t: torch.Tensor) -> bool:
            return self._ledger.key(t) in kept

        recent = self.readings[-self.window - 1 :]
        growth = [b - a for a, b in itertools.pairwise(recent)]
        entries = list(kept.values())
        report = LeakReport(
            device=str(self.device),
            step=now,
            window=self.window,
            growth=growth,
            allocated=self.readings[-1],
            sites=_group(entries) if self.sites else [],
            callers=_callers(entries),
            holders=find_holders(caller, is_new) if self.sites else [],
        )
        self.reports.append(report)
        logger.warning("%s", report)
        if self.on_leak is not None:
            self.on_leak(report)
        return report


def _group(entries: list[Entry]) -> list[LeakSite]:
    by_site: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for e in entries:
        key = (e.site, e.caller) if e.site else ("(before sites were recorded)", "")
        by_site[key].append(e)
    sites = []
    for (site, caller), group in by_site.items():
        shapes = Counter(("x".join(map(str, e.shape)) or "scalar", e.dtype) for e in group)
        sites.append(
            LeakSite(
                site,
                caller,
                len(group),
                sum(e.nbytes for e in group),
                [(s, d, n) for (s, d), n in shapes.most_common(5)],
            )
        )
    return sorted(sites, key=lambda s: -s.bytes)[:_TOP_SITES]


def _callers(entries: list[Entry]) -> list[tuple[str, int, int]]:
    """The user code lines under which the new storages were created, most bytes first."""
    count: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for e in entries:
        if e.caller:
            count[e.caller] += 1
            size[e.caller] += e.nbytes
    return [(line, count[line], n) for line, n in size.most_common(_TOP_SITES)]
