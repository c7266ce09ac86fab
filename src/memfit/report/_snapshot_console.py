"""Print a :class:`SnapshotReport` in the terminal with rich.

Details first (what is alive at the peak, the what-if table), the conclusion last (the peaks,
the replay check, the recommendation), as ``memfit estimate`` does. Text from the file (paths,
function names) goes through :class:`rich.text.Text`, never markup.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from memfit._units import format_bytes
from memfit.report._console import notes_text
from memfit.report._fit import box_width
from memfit.report._text import UNITS_CAPTION, format_share, shorten_middle
from memfit.snapshot import SnapshotReport

__all__ = ["render_snapshot"]

_SITE_WIDTH = 70  # the most cells of a site shown
_SITE_LEAST = 40  # the fewest cells a site gets beside the blocks' addresses
_FIXED = ("size", "of peak", "address", "allocated at")  # the blocks' columns before the site


def _when(report: SnapshotReport, event: int) -> str:
    text = f"event {event:,}"
    if report.duration_s is not None and event < len(report.event_time_s):
        text += f", {report.event_time_s[event]:.3f} s"
    return text


def _header(report: SnapshotReport) -> Text:
    text = Text()
    text.append("memfit snapshot  ", style="bold")
    text.append(report.source, style="bold cyan")
    parts = [
        f"device {report.device}",
        f"{report.entries:,} trace entries",
        f"{report.events:,} allocations and frees",
    ]
    if report.duration_s is not None:
        parts.append(f"{report.duration_s:.2f} s recorded")
    parts.append(f"allocator {report.settings}")
    parts.append("starts empty" if report.complete else "starts mid-run")
    text.append("\n" + " · ".join(parts), style="dim")
    return text


def _site_room(width: int, others: list[int]) -> int:
    """The cells left for the site column, at most :data:`_SITE_WIDTH`."""
    return min(_SITE_WIDTH, width - box_width([*others, 0]))


def _blocks(report: SnapshotReport, width: int) -> Group:
    """The largest live blocks at the peak, one line each: the site cut in the middle to what
    ``width`` leaves it, the addresses left out (a footnote says so) where they would leave
    the site fewer than :data:`_SITE_LEAST` cells."""
    when = _when(report, report.peak_allocated_event)
    table = Table(title=f"Largest live blocks at the peak allocated ({when})", title_justify="left")
    rows = [
        [
            format_bytes(b.size),
            format_share(b.size, report.peak_allocated),
            f"{b.address:#x}",
            "before the trace" if b.event is None else f"event {b.event:,}",
        ]
        for b in report.top_blocks
    ]
    sites = [b.site for b in report.top_blocks]
    fixed = [max([len(header), *(len(r[i]) for r in rows)]) for i, header in enumerate(_FIXED)]
    # "allocated at" wraps: its header, and "before the trace", on two lines
    fixed[3] = max([len("before the"), *(len(r[3]) for r in rows if r[3].startswith("event"))])
    room = _site_room(width, fixed)
    addresses = room >= _SITE_LEAST or not any(sites)
    if not addresses:
        room = _site_room(width, fixed[:2] + fixed[3:])
    for i, header in enumerate(_FIXED):
        if i != 2 or addresses:
            table.add_column(header, justify="left" if i == 2 else "right", no_wrap=i != 3)
    table.add_column("site", no_wrap=True)
    for row, site in zip(rows, sites, strict=True):
        cells = row if addresses else row[:2] + row[3:]
        table.add_row(*cells, Text(shorten_middle(site, max(room, 5)) if site else "-"))
    if addresses:
        return Group(table)
    wider = box_width([*fixed, _SITE_LEAST])
    note = (
        f"Addresses left out at this width: a terminal of {wider} columns, --json or --html "
        "shows them."
    )
    return Group(table, Text(note, style="dim"))


def _sites(report: SnapshotReport, width: int) -> Table | Text:
    if report.frames_note is not None:
        return Text.assemble(("Allocation sites: ", "bold"), (report.frames_note, "dim"))
    table = Table(title="Top allocation sites at the peak allocated", title_justify="left")
    table.add_column("site (first frame outside torch)", no_wrap=True)
    table.add_column("live", justify="right", no_wrap=True)
    table.add_column("blocks", justify="right", no_wrap=True)
    sizes = [format_bytes(s.size) for s in report.top_sites]
    counts = [f"{s.count:,}" for s in report.top_sites]
    room = _site_room(width, [max(map(len, ["live", *sizes])), max(map(len, ["blocks", *counts]))])
    for s, size, count in zip(report.top_sites, sizes, counts, strict=True):
        table.add_row(Text(shorten_middle(s.site, max(room, 5))), size, count)
    return table


def _what_if(report: SnapshotReport) -> Group:
    table = Table(
        title="What if: the same allocations and frees under other allocator settings",
        title_justify="left",
        caption=UNITS_CAPTION,
    )
    width = max((len(w.label) for w in report.what_if), default=10) + 2
    table.add_column("PYTORCH_CUDA_ALLOC_CONF", no_wrap=True, min_width=width)
    table.add_column("peak reserved", justify="right", no_wrap=True)
    table.add_column("saves", justify="right")
    footnotes = Text(style="dim")
    for w in report.what_if:
        label = Text(w.label, style="bold" if w.recorded else "")
        if w.note and not w.recorded:
            mark = "*" * (len(footnotes.plain.splitlines()) + 1)
            label.append(mark)
            footnotes.append(f"{mark} {w.note}\n")
        if w.peak_reserved is None:
            table.add_row(label, "-", Text(w.outcome or "", style="red"))
            continue
        saved = w.saved or 0
        share = format_share(saved, report.replay.emulated_peak_reserved)
        saves = "(recorded)" if w.recorded else f"{format_bytes(saved)} ({share})"
        style = "green" if saved > 0 else ("red" if saved < 0 else "")
        table.add_row(label, format_bytes(w.peak_reserved), Text(saves, style=style))
    footnotes.rstrip()
    return Group(table, footnotes) if footnotes.plain else Group(table)


def _peaks(report: SnapshotReport) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column()
    table.add_column(style="dim")
    table.add_row(
        "peak allocated",
        format_bytes(report.peak_allocated),
        _when(report, report.peak_allocated_event),
        "max_memory_allocated(), emulated",
    )
    table.add_row(
        "peak requested",
        format_bytes(report.peak_requested),
        _when(report, report.peak_requested_event),
        "asked for by live allocations (trace)",
    )
    table.add_row(
        "peak reserved",
        format_bytes(report.peak_reserved),
        _when(report, report.peak_reserved_event),
        "max_memory_reserved() (trace)",
    )
    largest = report.largest_free_at_peak
    table.add_row(
        "unused reserved",
        format_bytes(report.fragmentation_at_peak),
        "at the peak reserved",
        "reserved - allocated"
        + (f"; largest free block {format_bytes(largest)}" if largest is not None else ""),
    )
    return table


def _ooms(report: SnapshotReport) -> Text | None:
    if not report.ooms:
        return None
    text = Text(f"{len(report.ooms)} out-of-memory entries in the trace", style="bold red")
    for o in report.ooms[:5]:
        text.append(
            f"\n  • entry {o.position:,}: asked for {format_bytes(o.size)} with "
            f"{format_bytes(o.device_free)} free on the device"
        )
    return text


def render_snapshot(report: SnapshotReport, console: Console | None = None) -> None:
    """Print ``report`` to ``console`` (a new stdout console when ``None``)."""
    out = console if console is not None else Console()
    parts: list[RenderableType] = [_header(report)]
    if report.top_blocks:
        parts += [Text(), _blocks(report, out.width)]
    parts += [Text(), _sites(report, out.width)]
    if report.what_if:
        parts += [Text(), _what_if(report)]
    oom = _ooms(report)
    if oom is not None:
        parts += [Text(), oom]
    parts += [Text(), _peaks(report)]
    style = "green" if report.replay.exact else "yellow"
    parts.append(Text.assemble(("Replay check: ", "bold"), (report.replay.message, style)))
    parts += [Text(), Text.assemble(("Recommendation: ", "bold"), report.recommendation)]
    notes = notes_text(report.notes)
    if notes is not None:
        parts += [Text(), notes]
    out.print(Group(*parts))
