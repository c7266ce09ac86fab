"""Print a :class:`SnapshotReport` in the terminal with rich.

Details first (what is alive at the peak, the what-if table), the conclusion last (the peaks,
the replay check, the recommendation), as ``memfit estimate`` does. Text from the file (paths,
function names) goes through :class:`rich.text.Text`, never markup.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from memfit._units import format_bytes
from memfit.report._console import notes_text
from memfit.report._text import UNITS_CAPTION, format_share, shorten_middle
from memfit.snapshot import SnapshotReport

__all__ = ["render_snapshot"]

_SITE_WIDTH = 70


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


def _blocks(report: SnapshotReport) -> Table:
    when = _when(report, report.peak_allocated_event)
    table = Table(title=f"Largest live blocks at the peak allocated ({when})", title_justify="left")
    table.add_column("size", justify="right")
    table.add_column("of peak", justify="right")
    table.add_column("address")
    table.add_column("allocated at", justify="right")
    table.add_column("site", no_wrap=True)
    for b in report.top_blocks:
        table.add_row(
            format_bytes(b.size),
            format_share(b.size, report.peak_allocated),
            f"{b.address:#x}",
            "before the trace" if b.event is None else f"event {b.event:,}",
            Text(shorten_middle(b.site, _SITE_WIDTH) if b.site else "-"),
        )
    return table


def _sites(report: SnapshotReport) -> Table | Text:
    if report.frames_note is not None:
        return Text.assemble(("Allocation sites: ", "bold"), (report.frames_note, "dim"))
    table = Table(title="Top allocation sites at the peak allocated", title_justify="left")
    table.add_column("site (first frame outside torch)", no_wrap=True)
    table.add_column("live", justify="right")
    table.add_column("blocks", justify="right")
    for s in report.top_sites:
        table.add_row(
            Text(shorten_middle(s.site, _SITE_WIDTH)), format_bytes(s.size), f"{s.count:,}"
        )
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
    parts: list[Text | Table | Group] = [_header(report)]
    if report.top_blocks:
        parts += [Text(), _blocks(report)]
    parts += [Text(), _sites(report)]
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
