"""The readable report (Markdown) of an out-of-memory error: :func:`oom_markdown`.

It renders a :class:`memfit.oom.OOMDiagnosis`; the JSON beside it is the diagnosis's
``to_dict()``. ``memfit.oom_report``, ``memfit run`` and the trainer callbacks hand this
function to :mod:`memfit.oom`, which writes the ``.md`` file when the error has surfaced.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memfit._units import format_bytes
from memfit.advice import Fix
from memfit.oom import Frame, Incident, OOMDiagnosis, command_line
from memfit.snapshot import SnapshotReport

__all__ = ["oom_markdown"]

_TORCH = re.compile(r"(?:^|[/\\])torch[/\\]")
_SHOWN_FRAMES = 12
_TOP = 5


def _size(n: int | None) -> str:
    return "not known" if n is None else format_bytes(n)


def _is_user(frame: Frame) -> bool:
    return frame.filename.endswith(".py") and not _TORCH.search(frame.filename)


def _stack_lines(frames: tuple[Frame, ...]) -> list[str]:
    """User frames, most recent call last, and the torch call they were in."""
    user = [f for f in frames if _is_user(f)][:_SHOWN_FRAMES]
    lines = [f"  {f.text()}" for f in reversed(user)]
    if frames and not _is_user(frames[0]):
        lines.append(f"  -> inside torch: {frames[0].text()}")
    return lines


def _where(incident: Incident) -> list[str]:
    out = ["## Where it failed", ""]
    phase = incident.phase
    if phase == "forward" and incident.grad_enabled is False:
        phase = "forward (no grad: inference)"
    out.append(f"Phase: **{phase}**.")
    frames = incident.stack
    if not any(_is_user(f) for f in frames) and incident.recorded_frames:
        frames = incident.recorded_frames
    if any(_is_user(f) for f in frames):
        out += ["", "The failing allocation (most recent call last):", "", "```"]
        out += _stack_lines(frames)
        out.append("```")
    if not incident.in_main_thread:
        out += [
            "",
            f"It was made by the thread '{incident.thread}' (in a backward pass, autograd's "
            "thread for the device), with no Python frames of its own. The main thread was at:",
        ]
        if incident.main_stack:
            out += ["", "```", *_stack_lines(incident.main_stack), "```"]
    return out


def _memory(incident: Incident) -> list[str]:
    rows = [
        ("allocated", incident.allocated, "tensors alive: torch.cuda.memory_allocated()"),
        ("reserved", incident.reserved, "held by PyTorch's caching allocator: memory_reserved()"),
        (
            "reserved but unallocated",
            incident.fragmentation,
            "free memory stranded in partly used segments (fragmentation)",
        ),
        (
            "largest free block",
            incident.largest_free,
            "the largest request PyTorch could serve without new device memory",
        ),
        (
            "outside PyTorch, this process",
            incident.non_pytorch,
            "CUDA context, cuBLAS/cuDNN workspaces, NCCL (NVML process memory - reserved)",
        ),
        ("free on the device", incident.device_free, "cudaMemGetInfo, at the failure"),
    ]
    if incident.fraction_limited:
        rows.append(("limit", incident.limit, "set_per_process_memory_fraction"))
    rows.append(("device total", incident.device_total, incident.device_name or ""))
    out = ["## Memory at the failure", "", "| | size | |", "|---|---:|---|"]
    out += [f"| {name} | {_size(value)} | {what} |" for name, value, what in rows]
    if incident.nvml_process is None:
        other = None
        if incident.device_total is not None and incident.reserved is not None:
            other = incident.device_total - incident.device_free - incident.reserved
        out += [
            "",
            f"This process's memory outside PyTorch is not known ({incident.nvml_note or 'no NVML'}"
            f"); device total - free - reserved = {_size(other)} is used by this process's CUDA "
            "context and libraries and by other processes together.",
        ]
    model = incident.model
    if model is not None:
        dtypes = ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(model.dtypes.items()))
        name = model.name or "modules"
        out += [
            "",
            "Held by the model and optimizer found in the program's frames:",
            "",
            "| | size |",
            "|---|---:|",
            f"| parameters: {name}, {model.parameters:,} ({dtypes or 'none here'}) "
            f"| {format_bytes(model.parameter_bytes)} |",
            f"| gradients | {format_bytes(model.gradient_bytes)} |",
            f"| optimizer state ({model.optimizer or 'none found'}) "
            f"| {format_bytes(model.optimizer_state_bytes)} |",
            f"| working set: activations and temporaries (allocated - the above) "
            f"| {_size(incident.activations)} |",
        ]
    return out


def _trace(analysis: SnapshotReport | None, note: str | None, incident: Incident) -> list[str]:
    out = ["## Over the recorded trace", ""]
    if analysis is None:
        out.append(
            note
            or "No allocator trace was recorded (record_history=False, or memory history was "
            "off), so there are no peaks, allocation sites or allocator replays."
        )
        return out
    out.append(
        f"{analysis.events:,} allocator events: peak allocated "
        f"{format_bytes(analysis.peak_allocated)}, peak reserved "
        f"{format_bytes(analysis.peak_reserved)}; at the peak reserved, "
        f"{format_bytes(analysis.fragmentation_at_peak)} reserved but unallocated and a largest "
        f"free block of {_size(analysis.largest_free_at_peak)}. Replay check: "
        f"{analysis.replay.message}."
    )
    if analysis.top_sites:
        out += ["", "Largest allocation sites alive at the peak:", ""]
        out += ["| site | size | blocks |", "|---|---:|---:|"]
        out += [
            f"| `{r.site}` | {format_bytes(r.size)} | {r.count} |"
            for r in analysis.top_sites[:_TOP]
        ]
    elif analysis.frames_note:
        out += ["", analysis.frames_note[:1].upper() + analysis.frames_note[1:] + "."]
    rows = [r for r in analysis.what_if if not r.recorded]
    if rows:
        out += ["", "The trace replayed under other allocator settings:", ""]
        out += ["| setting | peak reserved | saved |", "|---|---:|---:|"]
        for r in rows:
            if r.peak_reserved is None:
                out.append(f"| {r.label} | {r.outcome or 'not replayed'} | |")
            else:
                saved = format_bytes(r.saved or 0)
                out.append(f"| {r.label} | {format_bytes(r.peak_reserved)} | {saved} |")
    if incident.history_entries and not analysis.complete:
        out += ["", "The trace does not reach back to the start of the process (ring buffer)."]
    return out


def _fixes(fixes: Sequence[Fix], notes: Sequence[str], incident: Incident) -> list[str]:
    out = ["## Fixes, by expected saving", ""]
    if incident.shortfall > 0:
        out.append(f"To cover: the {format_bytes(incident.shortfall)} shortfall.")
    for i, fix in enumerate(fixes, 1):
        saving = "saving not estimated" if fix.saving is None else f"saves ~{_size(fix.saving)}"
        cover = {True: " (covers the shortfall)", False: " (not enough alone)", None: ""}
        out += ["", f"{i}. **{fix.name}**: {saving}{cover[fix.covers]}", f"   - {fix.basis}"]
        out += [f"   - {where}: `{code}`" if where else f"   - `{code}`" for where, code in fix.how]
        out.append(f"   - cost: {fix.cost}")
    if not fixes:
        out += ["", "No fix applies that memfit can quantify."]
    if notes:
        out += ["", *[f"- {n}" for n in notes]]
    out += [
        "",
        "Savings are for the moment of the failure; the rest of the step may need more. "
        "`memfit estimate` predicts a whole step's peak before a run.",
    ]
    return out


def oom_markdown(diagnosis: OOMDiagnosis) -> str:
    """The report of ``diagnosis`` as Markdown."""
    incident = diagnosis.incident
    command = command_line(incident)
    limited = (
        f" The process was limited to {format_bytes(incident.limit)} of the device's "
        f"{_size(incident.device_total)} by set_per_process_memory_fraction."
        if incident.fraction_limited
        else ""
    )
    block = (
        f" (for a block of {format_bytes(incident.block_size)})"
        if incident.block_size is not None and incident.block_size != incident.alloc_size
        else ""
    )
    facts = [
        f"`{command}`",
        _rank(incident.distributed),
        f"pid {incident.pid}",
        incident.host or "",
        incident.time,
        incident.device_name or "",
        f"torch {incident.torch_version}",
    ]
    out = [
        f"# CUDA out of memory: tried to allocate {format_bytes(incident.alloc_size)} "
        f"on cuda:{incident.device_index}",
        "",
        " · ".join(f for f in facts if f),
        "",
        f"PyTorch asked the device for {format_bytes(incident.alloc_size)}{block} when "
        f"{format_bytes(incident.available)} were available to it: "
        f"**{format_bytes(incident.shortfall)} short**.{limited}",
        "",
        *_where(incident),
        "",
        *_memory(incident),
        "",
        *_trace(diagnosis.analysis, diagnosis.analysis_note, incident),
        "",
        *_fixes(diagnosis.fixes, diagnosis.notes, incident),
        "",
        "## Files",
        "",
    ]
    if incident.snapshot_path is not None:
        name = incident.snapshot_path.name
        out.append(
            f"- `{name}`: the allocator snapshot at the failure; `memfit snapshot {name}`, or "
            "open it at https://pytorch.org/memory_viz"
        )
    out.append(f"- `{incident.path.name}`: these facts and this analysis as JSON")
    if incident.errors:
        out += ["", "Not collected at the failure:", *[f"- {e}" for e in incident.errors]]
    out += ["", "Sizes in binary units: GiB = 2^30 bytes, MiB = 2^20 bytes."]
    return "\n".join(out) + "\n"


def _rank(distributed: dict[str, Any] | None) -> str:
    """``rank 1 of 8 (nccl, local rank 1)`` for a rank of a distributed job, else nothing."""
    if not distributed:
        return ""
    extra = [str(distributed["backend"])] if distributed.get("backend") else []
    if distributed.get("local_rank") is not None:
        extra.append(f"local rank {distributed['local_rank']}")
    more = f" ({', '.join(extra)})" if extra else ""
    return f"rank {distributed.get('rank')} of {distributed.get('world_size')}{more}"
