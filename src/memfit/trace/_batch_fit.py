"""Fitting a batch model (``_batch_model``) on a configuration's traces at a few batch sizes:
the traces matched on their base events and kernel call sites, each base size, shape dimension,
call's integer and op's FLOPs and bytes as ``a*b + c``, and every sample derived again from
the model and compared with its trace (``same_trace``): what the model derives at a sampled
batch is that batch's trace, event for event."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memfit._events import AllocationInfo
from memfit.trace._batch_model import (
    MIN_BATCH,
    Base,
    BatchModel,
    BatchRefusal,
    Line,
    Split,
    canonical,
    line,
    split,
)
from memfit.trace._costs import StepCosts
from memfit.trace._kernel_calls import KernelCalls
from memfit.trace._tracer import Trace

__all__ = ["fit_batch_model", "same_trace"]


def fit_batch_model(traces: Mapping[int, Trace]) -> BatchModel | BatchRefusal:
    """The batch model of one configuration's ``traces`` (by batch size, two or more, each
    traced with ``kernel_calls=True`` at a batch of at least :data:`MIN_BATCH`), or why there
    is none."""
    batches = tuple(sorted(traces))
    if len(batches) < 2:
        return BatchRefusal("a batch model needs traces at two batch sizes or more")
    if batches[0] < MIN_BATCH:
        return BatchRefusal(f"a batch of {batches[0]} cannot be sampled (at least {MIN_BATCH})")
    samples = [traces[b] for b in batches]
    logs: list[KernelCalls] = []
    for trace in samples:
        why = _samplable(trace)
        if why is not None:
            return BatchRefusal(why)
        assert trace.kernel_calls is not None
        logs.append(trace.kernel_calls)
    splits = [split(t, log) for t, log in zip(samples, logs, strict=True)]
    why = _different(batches, samples, logs, splits)
    if why is not None:
        return BatchRefusal(why)
    base = _base(batches, samples, splits)
    if isinstance(base, BatchRefusal):
        return base
    numbers = _numbers(batches, logs)
    if isinstance(numbers, BatchRefusal):
        return numbers
    costs = _costs(batches, [t.costs for t in samples])
    if isinstance(costs, BatchRefusal):
        return costs
    model = BatchModel(batches, samples[0], base, splits[0], numbers, costs)
    for b, trace in zip(batches, samples, strict=True):
        derived = model.trace_at(b)
        if isinstance(derived, BatchRefusal):
            return derived
        if derived.notes != trace.notes:
            changed = [n for n in trace.notes if n not in derived.notes] or trace.notes
            return BatchRefusal(
                f"the notes change with the batch, as memfit does not derive them (at batch {b}: "
                f"{changed[0]!r})"
            )
        why = same_trace(derived, trace)
        if why is not None:
            return BatchRefusal(f"derived again at batch {b}, the trace differs: {why}")
    return model


def _samplable(trace: Trace) -> str | None:
    """Why ``trace`` cannot be a batch model's sample, or None."""
    if trace.kernel_calls is None:
        return "a trace without its kernel calls logged cannot be sampled"
    if trace.kernel_calls.compiled:
        return "a compiled model's buffers are planned by inductor for each shape it compiles"
    if trace.derived_from:
        return "a derived trace cannot be sampled"
    return None


def _different(
    batches: tuple[int, ...], samples: list[Trace], logs: list[KernelCalls], splits: list[Split]
) -> str | None:
    """Where the traces do not match on their base events and call sites, in words."""
    first, log0, split0 = samples[0], logs[0], splits[0]
    plain = (
        "parameters",
        "copied_steps",
        "copied_micro_batches",
        "traced_again",
        "uneven_shards",
        "host_memory",
    )
    keys0 = [c.shape_key() for c in log0.calls]
    base0 = _base_shape(first, split0)
    sites0 = _site_shape(split0)
    for b, trace, log, cut in zip(batches[1:], samples[1:], logs[1:], splits[1:], strict=True):
        pair = f"the traces at batch sizes {batches[0]} and {b}"
        if len(cut.base) != len(split0.base):
            where = _first_difference(first, split0, trace, cut)
            return (
                f"{pair} differ: {len(split0.base)} and {len(cut.base)} events besides what "
                f"kernels allocate by memfit's rules ({where})"
            )
        if _base_shape(trace, cut) != base0:
            return f"{pair} differ: {_first_difference(first, split0, trace, cut)}"
        if (cut.phases, cut.steps_start, cut.empties) != (
            split0.phases,
            split0.steps_start,
            split0.empties,
        ):
            return f"{pair} run other phases"
        for name in plain:
            if getattr(trace, name) != getattr(first, name):
                return f"{pair} differ in {name.replace('_', ' ')}"
        if [c.shape_key() for c in log.calls] != keys0 or _site_shape(cut) != sites0:
            return f"{pair} differ in the kernels that allocate by memfit's rules"
    return None


def _base_shape(trace: Trace, cut: Split) -> list[tuple[Any, ...]]:
    """The base events with blocks numbered in order of first use and each allocation's info
    (all but its shape's sizes) in place of its index."""
    names: dict[int, int] = {}
    out: list[tuple[Any, ...]] = []
    for i in cut.base:
        e = trace.events[i]
        block = names.setdefault(e.block, len(names))
        if e.info is None:
            out.append((e.kind, block, e.stream))
        else:
            info = trace.infos[e.info]
            what = (info.category, info.op, info.module, info.phase, info.dtype, len(info.shape))
            out.append((e.kind, block, e.stream, what))
    return out


def _site_shape(cut: Split) -> list[tuple[Any, ...]]:
    return [
        (s.call, start, marks, scratch, s.suspended, s.module, s.phase, s.stream)
        for s, start, marks, scratch in cut.sites
    ]


def _first_difference(a: Trace, cut_a: Split, b: Trace, cut_b: Split) -> str:
    """The first base allocation of ``b`` that ``a`` does not make in its place, in words."""
    for i, j in zip(cut_a.base, cut_b.base, strict=False):
        x, y = a.events[i], b.events[j]
        same = x.kind == y.kind and x.stream == y.stream
        if same and x.info is not None and y.info is not None:
            ix, iy = a.infos[x.info], b.infos[y.info]
            same = (ix.op, ix.module, ix.phase, ix.category) == (
                iy.op,
                iy.module,
                iy.phase,
                iy.category,
            )
        if not same:
            if y.kind == "alloc" and y.info is not None:
                return f"first at {_describe(b, y.info)}"
            return "first where one frees and the other allocates"
    return "one runs on where the other ends"


def _describe(trace: Trace, info: int) -> str:
    found = trace.infos[info]
    return f"{found.op} in {found.module or '(outside modules)'} ({found.phase})"


def _base(
    batches: tuple[int, ...], samples: list[Trace], splits: list[Split]
) -> Base | BatchRefusal:
    """The base events of the first sample, each size and shape as lines across the samples."""
    first, cut = samples[0], splits[0]
    events = [first.events[i] for i in cut.base]
    sizes: list[Line | None] = []
    info: list[int | None] = []
    infos: list[AllocationInfo] = []
    shapes: list[tuple[Line, ...] | None] = []
    for k, event in enumerate(events):
        if event.kind == "free" or event.info is None:
            sizes.append(None)
            info.append(None)
            continue
        values = [t.events[s.base[k]].size for t, s in zip(samples, splits, strict=True)]
        fit = _constant_or_line(batches, values)
        if fit is None:
            return BatchRefusal(
                f"{_describe(first, event.info)} allocates "
                + ", ".join(f"{v} bytes at batch {b}" for b, v in zip(batches, values, strict=True))
                + ": not a linear function of the batch"
            )
        sizes.append(fit)
        found = [_info(t, s.base[k]).shape for t, s in zip(samples, splits, strict=True)]
        dims = _shape_lines(batches, found)
        if isinstance(dims, str):
            return BatchRefusal(
                f"the shape of {_describe(first, event.info)} {dims} ({', '.join(map(str, found))})"
            )
        info.append(len(infos))
        infos.append(first.infos[event.info])
        shapes.append(dims)
    return Base(events, info, sizes, infos, shapes)


def _info(trace: Trace, event: int) -> AllocationInfo:
    index = trace.events[event].info
    assert index is not None  # an allocation, matched with the first sample's
    return trace.infos[index]


def _shape_lines(
    batches: tuple[int, ...], shapes: list[tuple[int, ...]]
) -> tuple[Line, ...] | str | None:
    """A shape's dimensions as lines (None: the same at every batch), or why they are not."""
    if shapes.count(shapes[0]) == len(shapes):
        return None
    dims = _lines(batches, [list(s) for s in shapes])
    if dims is None:
        return "is not a linear function of the batch"
    if sum(1 for a, _ in dims if a) > 1:
        # two dimensions that grow with the batch grow its size as their product (a batch by
        # batch similarity matrix): not a line, whatever two samples say
        return "grows with the batch in two dimensions"
    return tuple(dims)


def _lines(batches: Sequence[int], rows: list[list[int]]) -> list[Line] | None:
    """Each column of ``rows`` (one row per sample) as a line, or None."""
    out: list[Line] = []
    for values in zip(*rows, strict=True):
        fit = _constant_or_line(batches, list(values))
        if fit is None:
            return None
        out.append(fit)
    return out


def _numbers(
    batches: tuple[int, ...], logs: list[KernelCalls]
) -> list[tuple[Line, ...]] | BatchRefusal:
    """Each logged call's integers (shapes, strides, scalars) as lines."""
    out: list[tuple[Line, ...]] = []
    for index, call in enumerate(logs[0].calls):
        lines = _lines(batches, [list(log.calls[index].numbers) for log in logs])
        if lines is None:
            return BatchRefusal(
                f"the shapes {call.func} is called with are not linear functions of the batch"
            )
        out.append(tuple(lines))
    return out


def _costs(
    batches: tuple[int, ...], costs: list[StepCosts | None]
) -> dict[str, list[tuple[str, Line, Line]]] | BatchRefusal | None:
    """Each phase's ops, their FLOPs and bytes as lines (None where a trace counted none)."""
    if any(c is None for c in costs):
        return None
    steps = [c for c in costs if c is not None]
    first = steps[0]
    if any(
        list(c.phases) != list(first.phases)
        or c.parameter_tensors != first.parameter_tensors
        or c.compiled != first.compiled
        for c in steps
    ):
        return BatchRefusal("the step's ops differ between the sampled batch sizes")
    out: dict[str, list[tuple[str, Line, Line]]] = {}
    for name, phase in first.phases.items():
        columns = [c.phases[name].ops for c in steps]
        if any(len(ops) != len(phase.ops) for ops in columns):
            return BatchRefusal(f"the ops of {name} differ between the sampled batch sizes")
        ops: list[tuple[str, Line, Line]] = []
        for row in zip(*columns, strict=True):
            kind = row[0][0]
            if any(op[0] != kind for op in row):
                kinds = sorted({op[0] for op in row})
                return BatchRefusal(f"an op of {name} runs as {' and '.join(kinds)} by batch size")
            flops = _constant_or_line(batches, [op[1] for op in row])
            nbytes = _constant_or_line(batches, [op[2] for op in row])
            if flops is None or nbytes is None:
                return BatchRefusal(
                    f"an op of {name} ({kind}) has FLOPs or bytes that are not linear in the batch"
                )
            ops.append((kind, flops, nbytes))
        out[name] = ops
    return out


def _constant_or_line(batches: Sequence[int], values: list[int]) -> Line | None:
    return (0, values[0]) if values.count(values[0]) == len(values) else line(batches, values)


def same_trace(derived: Trace, trace: Trace) -> str | None:
    """Where ``derived`` differs from ``trace`` (its events, what each allocation is, phases,
    notes, costs), in words; None where they allocate alike (blocks may be numbered
    otherwise)."""
    a, b = canonical(derived), canonical(trace)
    if len(a) != len(b):
        return f"{len(a)} and {len(b)} events"
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        if x != y:
            return f"event {i}: {_words(x)} and {_words(y)}"
    if derived.phases != trace.phases or derived.steps_start != trace.steps_start:
        return "the phases"
    if derived.notes != trace.notes:
        extra = [n for n in derived.notes if n not in trace.notes]
        return f"the notes ({(extra or derived.notes or ['none'])[0]!r})"
    if derived.costs != trace.costs:
        return "the step's ops (their kinds, FLOPs or bytes)"
    return None


def _words(event: tuple[Any, ...]) -> str:
    kind, _, size, _, info = event
    if kind == "free" or info is None:
        return str(kind)
    return f"{size} bytes for {info[1]} in {info[2] or '(outside modules)'} ({info[3]})"
