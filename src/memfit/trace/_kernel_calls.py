"""The calls of a trace whose kernels allocate by memfit's rules, kept so that a rule can be asked
again at another batch size.

What a real kernel allocates that the meta kernel does not (``_kernels``: a reduction's partial
results, embedding backward's float32 sums, cuDNN's workspaces) is not a linear function of the
batch: it steps where the kernel's launch changes (``n // 10`` rows, a block count bounded by
the SMs, a table of measured sizes), and it may be absent at one batch and present at the next.
A trace asked to (``trace_workload(kernel_calls=True)``) logs each call of an op a rule covers
(``_kernels.RULE_OPS``) and each call a rule allocated for: the op, its arguments' shapes,
strides and integers (:class:`KernelCall`), and where in the trace its allocations went
(:class:`CallSite`: the event the call began at, the event after each output it recorded, the
event its scratch began at, and the events its rules allocated). A later step or micro-batch
copied from step 1's events (``_repeat``) copies its sites too. A batch model
(``_batch_model``) fits the calls' integers across a few traces and asks each rule again with
them, which gives what the kernel allocates at any batch, and puts it back at the call's site.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from memfit.trace._kernels import KernelModel, Scratch
from memfit.trace._scratch import Nested, Order

__all__ = ["CallSite", "KernelCall", "KernelCalls", "RuleMemory", "describe", "rebuild"]

# A call's arguments as a template and the integers in it: a tensor is ("T", dims, dtype) and
# takes 2 x dims integers (its shape, then its strides), an integer ("I",) takes one, lists,
# tuples and dicts nest (("L", items), ("D", ((key, item), ...))), anything else is a constant
# ("C", value): floats, booleans, dtypes, None.
Template = tuple[Any, ...]


def describe(value: Any, numbers: list[int]) -> Template:
    """The template of ``value``; its integers are appended to ``numbers`` in order."""
    if isinstance(value, torch.Tensor):
        numbers.extend(int(n) for n in value.shape)
        numbers.extend(int(n) for n in value.stride())
        return ("T", value.dim(), value.dtype)
    if type(value) is int:
        numbers.append(value)
        return ("I",)
    if isinstance(value, (list, tuple)):
        return ("L", tuple(describe(v, numbers) for v in value))
    if isinstance(value, dict):
        return ("D", tuple((k, describe(v, numbers)) for k, v in value.items()))
    return ("C", value)


def rebuild(template: Template, numbers: Iterator[int]) -> Any:
    """The value ``template`` describes, with its integers taken from ``numbers``: tensors are
    new meta tensors of those shapes and strides (lists come back as lists, the rules index
    them alike)."""
    kind = template[0]
    if kind == "T":
        dims = template[1]
        shape = [next(numbers) for _ in range(dims)]
        stride = [next(numbers) for _ in range(dims)]
        return torch.empty_strided(shape, stride, dtype=template[2], device="meta")
    if kind == "I":
        return next(numbers)
    if kind == "L":
        return [rebuild(t, numbers) for t in template[1]]
    if kind == "D":
        return {k: rebuild(t, numbers) for k, t in template[1]}
    return template[1]


@dataclass(frozen=True)
class RuleMemory:
    """What the rules allocate for one call, as the trace's dispatch allocates it: copies of
    inputs first, scratch after each output (``between``, by output), the copies freed after
    output ``early`` (None: when the call ends), then groups of scratch; and how many of its
    table lookups were interpolated (cuDNN's workspaces)."""

    copies: list[tuple[int, str]]
    between: dict[int, list[tuple[int, str]]] | None
    early: int | None
    groups: Sequence[list[Scratch] | Nested]
    interpolated: int
    order: Order = (False, "before")  # how the groups are freed (KernelModel.scratch_order)


@dataclass(frozen=True, slots=True)
class KernelCall:
    """One call of an op whose kernel allocates by a rule: what :class:`KernelModel` needs to be
    asked again (``template`` and ``numbers`` describe ``(args, kwargs)``)."""

    func: Any
    template: Template
    numbers: tuple[int, ...]

    def shape_key(self) -> tuple[Any, ...]:
        """What must agree between two traces' calls for one to stand for the other."""
        return (self.func, self.template, len(self.numbers))

    def memory(self, model: KernelModel, numbers: tuple[int, ...]) -> RuleMemory:
        """What the rules allocate for this call with its integers replaced by ``numbers``
        (as ``trace._recorder`` asks them: ``model``'s counters move as the trace's do)."""
        with torch._C.DisableTorchFunction():
            args, kwargs = rebuild(self.template, iter(numbers))
            args = tuple(args)
            before = model.convolutions.interpolated
            copies = model.copies_first(self.func, args, kwargs)
            between = model.between_outputs(self.func, args)
            early = model.copies_freed_after(self.func) if copies and between else None
            groups = model.scratch(self.func, args, kwargs)
            interpolated = model.convolutions.interpolated - before
        order = model.scratch_order(self.func)
        return RuleMemory(copies, between, early, groups, interpolated, order)


@dataclass(frozen=True)
class CallSite:
    """Where one call's rule allocations went in the trace: ``start``, the event the call
    began at (its copies first); ``marks``, the event after each output it recorded (scratch
    made between outputs follows); ``scratch``, the event its scratch began at; ``end``, the
    event after it; ``allocs``, the events its rules allocated (their frees are the frees of
    those blocks). ``module``, ``phase`` and ``stream`` are what its allocations were made in.
    A step copied from step 1's events has a site of its own for each of step 1's."""

    call: int
    start: int
    marks: tuple[int, ...]
    scratch: int
    end: int
    allocs: tuple[int, ...]
    suspended: bool  # the trace recorded no outputs (a fused kernel's pieces)
    module: str
    phase: str
    stream: int


@dataclass
class KernelCalls:
    """The kernel calls one trace logged (:class:`KernelCall`) and where each allocated
    (:class:`CallSite`, in the trace's order); the kernel model's settings, to ask the rules
    again."""

    sm: int
    sm_count: int
    threads_per_sm: int
    cublas_workspace: int
    calls: list[KernelCall] = field(default_factory=list)
    sites: list[CallSite] = field(default_factory=list)
    compiled: bool = False  # a compiled model's trace: inductor planned its buffers

    @classmethod
    def of(cls, kernels: KernelModel) -> KernelCalls:
        return cls(kernels.sm, kernels.sm_count, kernels.threads_per_sm, kernels.cublas_workspace)

    def model(self) -> KernelModel:
        """A fresh kernel model with this trace's settings (its counters at zero)."""
        return KernelModel(
            self.sm,
            self.cublas_workspace,
            sm_count=self.sm_count,
            threads_per_sm=self.threads_per_sm,
        )

    def record(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """Log one call; returns its index (for its :class:`CallSite`)."""
        numbers: list[int] = []
        with torch._C.DisableTorchFunction():
            template = describe((args, kwargs), numbers)
        self.calls.append(KernelCall(func, template, tuple(numbers)))
        return len(self.calls) - 1

    def copied(
        self, start: int, moved: list[int | None], end: int, rename: Callable[[str], str]
    ) -> None:
        """Events ``start:start + len(moved)`` were copied (``moved[i]``: where event
        ``start + i`` went, None where it was not copied), the copy ending at event ``end``,
        its phases renamed by ``rename``: each site within them is copied too."""
        stop = start + len(moved)
        after: list[int] = [end] * (len(moved) + 1)  # where a mark before event i lands
        for i in range(len(moved) - 1, -1, -1):
            found = moved[i]
            after[i] = found if found is not None else after[i + 1]

        def land(event: int) -> int:
            return after[event - start]

        for site in [s for s in self.sites if start <= s.start and s.end <= stop]:
            allocs = tuple(moved[a - start] for a in site.allocs)
            if any(a is None for a in allocs):
                continue  # a rule's persistent allocation is not copied: no site to copy
            self.sites.append(
                CallSite(
                    site.call,
                    land(site.start),
                    tuple(land(m) for m in site.marks),
                    land(site.scratch),
                    land(site.end),
                    tuple(a for a in allocs if a is not None),
                    site.suspended,
                    site.module,
                    rename(site.phase),
                    site.stream,
                )
            )
