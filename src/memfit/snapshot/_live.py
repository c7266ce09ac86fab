"""What is alive at the peak: the largest blocks, and the bytes by allocation site."""

from __future__ import annotations

from dataclasses import dataclass

from memfit.snapshot._sites import NO_FRAMES
from memfit.snapshot._snapshot import Snapshot
from memfit.snapshot._timeline import TraceTimeline

__all__ = ["LiveBlock", "SiteRow", "live_at_peak"]

_BEFORE = "(allocated before the trace)"
_NO_PYTHON = "(no Python frames: the autograd engine or another thread)"


@dataclass(frozen=True, slots=True)
class LiveBlock:
    """An allocation alive at the peak. ``event`` is when it was made (None: before the trace)."""

    address: int
    size: int  # bytes requested
    stream: int
    event: int | None
    site: str | None


@dataclass(frozen=True, slots=True)
class SiteRow:
    """Bytes alive at the peak, by allocation site."""

    site: str
    size: int
    count: int


def live_at_peak(
    snapshot: Snapshot, timeline: TraceTimeline, event: int, top: int
) -> tuple[list[LiveBlock], list[SiteRow], str | None]:
    """The largest live blocks and the top sites at ``event``."""
    t = snapshot.trace
    alive = timeline.live_at(event)
    sites_of_alive = t.site[timeline.entry[alive]]
    site_names = t.sites
    blocks = [
        LiveBlock(
            int(timeline.addr[i]),
            int(timeline.size[i]),
            int(timeline.stream[i]),
            int(i),
            site_names[s] if s >= 0 else None,
        )
        for i, s in zip(alive.tolist(), sites_of_alive.tolist(), strict=True)
    ]
    blocks += [
        LiveBlock(b.address, b.size, b.stream, None, snapshot.block_sites.get(b.address))
        for b in timeline.initial_live_at(event)
    ]
    blocks.sort(key=lambda b: (-b.size, b.address))
    note = None
    sites: list[SiteRow] = []
    if not t.sites:
        note = NO_FRAMES
    else:
        totals: dict[str, list[int]] = {}
        for b in blocks:
            label = b.site or (_BEFORE if b.event is None else _NO_PYTHON)
            row = totals.setdefault(label, [0, 0])
            row[0] += b.size
            row[1] += 1
        sites = sorted(
            (SiteRow(s, v[0], v[1]) for s, v in totals.items()), key=lambda r: (-r.size, r.site)
        )[:top]
    return blocks[:top], sites, note
