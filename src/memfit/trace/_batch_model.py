"""A configuration's trace at any batch size, from its traces at a few: the batch model.

Most steps allocate the same blocks in the same order at every batch size, each block's size a
simple function of the batch. A trace's events are of two kinds here:

* what the meta kernels made (every tensor's storage, the optimizer's states, cuBLAS's
  workspaces), the *base* events: the same events at every batch, each size ``a*b + c`` with
  integers ``a`` and ``c`` (a shape that grows in two dimensions with the batch is refused);
* what a kernel rule added (``_kernels``: copies of inputs, a reduction's partial results,
  embedding backward's float32 sums, cuDNN's workspaces, attention's backward workspace),
  which steps with the batch (``n // 10`` rows, block counts bounded by the SMs, a measured
  table) and may be absent at one batch and present at the next. Each call a rule covers is
  logged with its shapes and integers and where its allocations went (``_kernel_calls``); at
  batch ``b`` the rule is asked again with those integers at ``b`` (each ``a*b + c``), and its
  allocations and frees are put back where the trace's dispatch puts them (copies before the
  outputs, scratch between outputs, scratch groups after them).

``_batch_fit.fit_batch_model`` matches the traces of one configuration at a few batch sizes on
their base events (count, order, kinds, streams, what each allocation is: op, module, phase,
category, dtype), their logged calls and phases, fits the lines, and derives each sample again
from them to show the derivation gives that trace back, notes and costs included.
:meth:`BatchModel.trace_at` then derives the trace at any batch of at least :data:`MIN_BATCH`:
a :class:`~memfit.trace.Trace` like any other (its ``derived_from`` names the sampled batches),
which the estimator replays into a whole estimate (peaks, breakdown by category and module,
timeline, notes: the samples', with the held batch's size and cuDNN's interpolated workspaces
said again at ``b``). The costs of a step (``_costs``: each op's kind, FLOPs and bytes, in order)
are fitted the same way: the same ops and kinds at every sample, FLOPs and bytes ``a*b + c``.

What a few samples cannot show is a branch on the batch outside their range (a model that runs
another kernel above some size, an op kind that changes with an alignment): a caller that
returns a derived answer traces that batch and compares (``BatchTraces.verify``).
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memfit._events import AllocationInfo, Category, MemoryEvent
from memfit.trace._costs import PhaseCost, StepCosts
from memfit.trace._kernel_calls import CallSite, KernelCalls, RuleMemory
from memfit.trace._scratch import Scratch, run_groups
from memfit.trace._trace_notes import held_batch_note
from memfit.trace._tracer import Trace

__all__ = [
    "MIN_BATCH",
    "Base",
    "BatchModel",
    "BatchRefusal",
    "Line",
    "Split",
    "canonical",
    "held_bytes",
    "line",
    "split",
]

# a batch of one lays out and reduces some tensors otherwise than any larger one (a dimension
# of one is skipped in contiguity checks: Llama-2-7B's padded causal mask is copied from batch 2
# on), so the model samples and answers batches of at least two
MIN_BATCH = 2
_HELD_OP = "batch held by the caller"  # the held batch's allocations (trace._tracer)
_HELD_NOTE = re.compile(r"^the step's caller holds its whole batch on the GPU")

Line = tuple[int, int]  # (a, c): a * batch + c


@dataclass(frozen=True)
class BatchRefusal:
    """Why a batch model could not be fitted, or could not answer a batch size: a sentence
    for the notes of whatever was traced instead."""

    reason: str


def line(batches: Sequence[int], values: Sequence[int]) -> Line | None:
    """``(a, c)`` with ``a * b + c == v`` at every sample, in integers; None if none."""
    step = values[1] - values[0]
    span = batches[1] - batches[0]
    if step % span:
        return None
    a = step // span
    c = values[0] - a * batches[0]
    for b, v in zip(batches[2:], values[2:], strict=True):
        if a * b + c != v:
            return None
    return a, c


Place = tuple[int, int]  # a point between events: (base events before it, sites begun before)


@dataclass(frozen=True)
class Split:
    """A trace's events split into base events and its kernel calls' sites (``_kernel_calls``):
    ``base`` holds the indices of the base events, ``sites`` the sites in the trace's order with
    their marks as base positions (how many base events come before each); ``phases``,
    ``steps_start`` and ``empties`` are the trace's marks between events as places, which a
    derived trace puts back among its own events."""

    base: list[int]
    sites: list[tuple[CallSite, int, tuple[int, ...], int]]  # site, start, marks, scratch
    phases: list[tuple[str, Place]]
    steps_start: Place
    empties: list[Place]


def split(trace: Trace, calls: KernelCalls) -> Split:
    """``trace``'s base events and its calls' sites at base positions."""
    sites = sorted(
        (s for s in calls.sites if s.end <= len(trace.events)), key=lambda s: (s.start, s.end)
    )
    rule_allocs = {a for site in sites for a in site.allocs}
    blocks = {trace.events[a].block for a in rule_allocs}
    base: list[int] = []
    before = [0] * (len(trace.events) + 1)  # base events before each event
    for i, e in enumerate(trace.events):
        before[i] = len(base)
        if i not in rule_allocs and not (e.kind == "free" and e.block in blocks):
            base.append(i)
    before[len(trace.events)] = len(base)
    starts = [s.start for s in sites]

    def place(event: int) -> Place:
        return before[min(event, len(trace.events))], bisect.bisect_left(starts, event)

    return Split(
        base,
        [(s, before[s.start], tuple(before[m] for m in s.marks), before[s.scratch]) for s in sites],
        [(name, place(i)) for name, i in trace.phases],
        place(trace.steps_start),
        [place(i) for i in trace.empty_cache_at],
    )


def canonical(trace: Trace) -> list[tuple[Any, ...]]:
    """``trace``'s events with blocks numbered in order of first use and each allocation's
    info in place of its index: two traces that allocate alike are equal here."""
    names: dict[int, int] = {}
    out: list[tuple[Any, ...]] = []
    for e in trace.events:
        block = names.setdefault(e.block, len(names))
        if e.info is None:
            out.append((e.kind, block, e.size, e.stream, None))
            continue
        i = trace.infos[e.info]
        info = (i.category, i.op, i.module, i.phase, i.shape, i.dtype)
        out.append((e.kind, block, e.size, e.stream, info))
    return out


@dataclass(frozen=True)
class Base:
    """The base events of a model: the first sample's events (``events[i]``), each
    allocation's info at ``info[i]`` of :attr:`infos` and its size as ``sizes[i]`` (None for a
    free), each info's shape as lines (None where it is the same at every batch)."""

    events: list[MemoryEvent]
    info: list[int | None]
    sizes: list[Line | None]
    infos: list[AllocationInfo]
    shapes: list[tuple[Line, ...] | None]


class BatchModel:
    """One configuration's events, infos and costs as functions of the batch size, fitted on
    traces at ``batches`` (``_batch_fit.fit_batch_model``); :meth:`trace_at` derives its trace
    at another batch size."""

    def __init__(
        self,
        batches: tuple[int, ...],
        template: Trace,
        base: Base,
        sites: Split,
        numbers: list[tuple[Line, ...]],
        costs: dict[str, list[tuple[str, Line, Line]]] | None,
    ) -> None:
        assert template.kernel_calls is not None
        self.batches = batches
        self._template = template
        self._calls: KernelCalls = template.kernel_calls
        self._base = base
        self._sites = sites
        self._numbers = numbers  # each logged call's integers, as lines
        self._costs = costs
        memory = self._memory(batches[0])
        self._conv_notes = [] if isinstance(memory, BatchRefusal) else memory[1]

    def trace_at(self, batch: int) -> Trace | BatchRefusal:
        """The trace at ``batch``, derived; or why it cannot be (the caller traces it)."""
        started = time.perf_counter()
        if batch < MIN_BATCH:
            return BatchRefusal(
                f"a batch of {batch} is traced: a dimension of one lays tensors out otherwise"
            )
        memory = self._memory(batch)
        if isinstance(memory, BatchRefusal):
            return memory
        made, conv_notes = memory
        emitter = _Emitter(self._base, self._sites, batch, made)
        events, infos, places = emitter.events()
        template = self._template
        notes = _notes_at(template, events, infos, self._conv_notes, conv_notes)
        if isinstance(notes, BatchRefusal):
            return BatchRefusal(f"at batch {batch}, {notes.reason}")
        return Trace(
            events,
            infos,
            [(name, places[at]) for name, at in self._sites.phases],
            places[self._sites.steps_start],
            template.parameters,
            notes,
            time.perf_counter() - started,
            copied_steps=template.copied_steps,
            copied_micro_batches=template.copied_micro_batches,
            costs=self._costs_at(batch),
            traced_again=template.traced_again,
            uneven_shards=template.uneven_shards,
            host_memory=template.host_memory,
            empty_cache_at=tuple(places[at] for at in self._sites.empties),
            derived_from=self.batches,
        )

    def _memory(self, batch: int) -> tuple[list[RuleMemory], list[str]] | BatchRefusal:
        """What each site's rules allocate at ``batch``, and the notes on cuDNN's workspaces
        they make (one kernel model asked for all, its counters adding up as the trace's)."""
        kernels = self._calls.model()
        at: dict[int, tuple[int, ...]] = {}
        made: list[RuleMemory] = []
        for site, *_ in self._sites.sites:
            numbers = at.get(site.call)
            if numbers is None:
                lines = self._numbers[site.call]
                numbers = tuple(a * batch + c for a, c in lines)
                if any(n < 0 and a for n, (a, _) in zip(numbers, lines, strict=True)):
                    call = self._calls.calls[site.call]
                    return BatchRefusal(
                        f"at batch {batch}, {call.func} in {site.module or '(outside modules)'} "
                        "would be called with a negative size"
                    )
                at[site.call] = numbers
            made.append(self._calls.calls[site.call].memory(kernels, numbers))
        return made, kernels.convolutions.notes()

    def _costs_at(self, batch: int) -> StepCosts | None:
        template = self._template.costs
        if self._costs is None or template is None:
            return None
        phases = {
            name: PhaseCost(
                [(kind, f[0] * batch + f[1], m[0] * batch + m[1]) for kind, f, m in ops]
            )
            for name, ops in self._costs.items()
        }
        return StepCosts(phases, template.parameter_tensors, template.compiled)


class _Emitter:
    """The derived events of a model at one batch: its base events with their sizes there, and
    each call site's rule allocations put back where the trace's dispatch makes them
    (``trace._recorder``: copies of inputs, the outputs with scratch after each, then scratch
    groups, the copies freed after output ``early`` or at the end)."""

    def __init__(self, base: Base, sites: Split, batch: int, made: list[RuleMemory]) -> None:
        self.base = base
        self.sites = sites
        self.batch = batch
        self.made = made
        self.infos = [
            info
            if lines is None
            else AllocationInfo(
                info.category,
                info.op,
                info.module,
                info.phase,
                tuple(a * batch + c for a, c in lines),
                info.dtype,
            )
            for info, lines in zip(base.infos, base.shapes, strict=True)
        ]
        self.out: list[MemoryEvent] = []
        self.block = 1 + max((e.block for e in base.events), default=0)
        self.copies: dict[int, list[int]] = {}

    def events(self) -> tuple[list[MemoryEvent], list[AllocationInfo], dict[Place, int]]:
        """The derived events, their infos, and the event each of the trace's places is."""
        cut = self.sites
        places = {*(at for _, at in cut.phases), cut.steps_start, *cut.empties}
        slots = sorted(
            [
                (pos, n, slot)
                for n, (_, start, marks, scratch) in enumerate(cut.sites)
                for slot, pos in enumerate((start, *marks, scratch))
            ]
            + [(pos, n, -1) for pos, n in places]  # a place comes before site n's slots
        )
        found: dict[Place, int] = {}
        base, batch, out = self.base, self.batch, self.out
        k = 0
        for pos, (event, info, size) in enumerate(
            zip(base.events, base.info, base.sizes, strict=True)
        ):
            while k < len(slots) and slots[k][0] == pos:
                self._slot(slots[k][1], slots[k][2], found, pos)
                k += 1
            if size is None:
                out.append(event)
            else:
                out.append(
                    MemoryEvent("alloc", event.block, size[0] * batch + size[1], event.stream, info)
                )
        for pos, n, slot in slots[k:]:
            self._slot(n, slot, found, pos)
        return out, self.infos, found

    def _alloc(self, site: CallSite, size: int, category: Category, label: str) -> int:
        block = self.block
        self.block += 1
        self.infos.append(AllocationInfo(category, label, site.module, site.phase))
        self.out.append(MemoryEvent("alloc", block, size, site.stream, len(self.infos) - 1))
        return block

    def _free(self, blocks: list[int]) -> None:
        self.out.extend(MemoryEvent("free", block, 0) for block in blocks)

    def _slot(self, n: int, slot: int, found: dict[Place, int], pos: int) -> None:
        """Slot ``slot`` of site ``n``: 0 its copies, 1.. after each output, the last its
        scratch; -1 the place before site ``n``'s at base position ``pos``."""
        if slot == -1:
            found[pos, n] = len(self.out)
            return
        site, _, marks, _ = self.sites.sites[n]
        mem = self.made[n]
        if slot == 0:
            self.copies[n] = [
                self._alloc(site, size, Category.TEMPORARY, label) for size, label in mem.copies
            ]
            if site.suspended and mem.early is not None:  # no outputs recorded: freed at once
                self._free(self.copies.pop(n))
        elif slot <= len(marks):
            i = slot - 1
            for size, label in (mem.between or {}).get(i, []):
                self._free([self._alloc(site, size, Category.WORKSPACE, label)])
            if mem.early is not None and i == min(mem.early, len(marks) - 1):
                self._free(self.copies.pop(n, [])[::-1])  # the last made goes first
        else:

            def alloc(item: Scratch) -> int:
                return self._alloc(site, item[0], Category.WORKSPACE, item[1])

            run_groups(mem.groups, mem.order, alloc, self._free)
            self._free(self.copies.pop(n, []))


def _notes_at(
    template: Trace,
    events: list[MemoryEvent],
    infos: list[AllocationInfo],
    conv_before: list[str],
    conv_now: list[str],
) -> list[str] | BatchRefusal:
    """The samples' notes, said again for ``events``: the held batch's bytes, and cuDNN's
    workspaces interpolated (in place of the samples' notes on them)."""
    notes = list(template.notes)
    for i, note in enumerate(notes):
        if _HELD_NOTE.match(note):
            notes[i] = held_batch_note(held_bytes(events, infos))
    if conv_now == conv_before:
        return notes
    at = [i for i, n in enumerate(notes) if n in conv_before]
    if not at or at != list(range(at[0], at[0] + len(at))):
        return BatchRefusal(
            "the notes on cuDNN's workspaces would change: " + "; ".join(conv_now or ["none"])
        )
    return [*notes[: at[0]], *conv_now, *notes[at[-1] + 1 :]]


def held_bytes(events: Sequence[MemoryEvent], infos: Sequence[AllocationInfo]) -> int:
    """The bytes of the batch the caller holds, among ``events``."""
    return sum(
        e.size
        for e in events
        if e.kind == "alloc" and e.info is not None and infos[e.info].op == _HELD_OP
    )
