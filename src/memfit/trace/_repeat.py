"""Later steps' input, forward and backward, copied from step 1's events instead of traced again.

memfit's own loop runs the same program at every step: from step 2 on, what differs is what
the optimizer holds, which the input, forward and backward never read. Tracing them again costs
what it cost the first time (a Llama-2-7B step: 1.5 s of 4 on two cores), so step 1's events are
copied, each allocation with a new block, when step 1 shows nothing that could make a later
step differ:

* everything its passes allocate is freed in them, but the gradients (freed by ``zero_grad``
  before the next step; the copy's are given to the parameters) and the workspaces a library
  handle makes once;
* they free nothing allocated before them;
* what hung on values in them (an ``.item()``, a data-dependent shape) read no part of the
  batch that the later step's batch holds other values in (an all-ones attention mask is read
  at every step and is the same; the token ids it is not read beside may differ).

Otherwise the step is traced again, as is every step of a user's step function or of a
compiled model.

Within step 1, micro-batches after the second are copied from the second the same way (the
first differs: it makes the gradients, the second adds to them), when the second kept nothing,
freed nothing from before it and read no batch values that differ: a step of 8 micro-batches
costs the trace about what one of 2 does (the planner's check of the plan it chose).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from memfit.trace._meta_cache import span as _span
from memfit.trace._recorder import Recorder
from memfit.trace._shadow import ShadowValues

__all__ = ["StepRepeat", "Tallies"]

_FIRST = "step1."


@dataclass(frozen=True)
class _Grad:
    """A parameter's gradient after step 1's backward: its block and layout."""

    param: nn.Parameter
    block: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class _MicroStart:
    """Where a micro-batch of step 1 began: its first event, the ops each phase had counted,
    the tallies."""

    event: int
    ops: dict[str, int]
    tallies: dict[str, int]


@dataclass
class Tallies:
    """Per-call counts a trace reports (attention kernels, interpolated workspaces): what a
    copied step adds to them, as its traced self would."""

    read: Callable[[], dict[str, int]]
    add: Callable[[dict[str, int]], None]


class StepRepeat:
    """Watches step 1 through the step hooks; :meth:`repeat` then copies it for later steps."""

    def __init__(
        self,
        recorder: Recorder,
        shadows: ShadowValues,
        phases: list[tuple[str, int]],
        set_phase: Callable[[str], None],
        tallies: Tallies,
    ) -> None:
        self._rec = recorder
        self._shadows = shadows
        self._phases = phases
        self._set_phase = set_phase
        self._tallies = tallies
        self.enabled = True  # the tracer turns it off where steps may differ
        # the next step's batch as flat leaves (cast as the step casts it), to compare with
        # step 1's; set with the workload (:meth:`batches`)
        self._leaves: Callable[[Any], list[Any]] = lambda batch: []
        self._make: Callable[[], Any] | None = None
        self._pending: list[Any] = []  # a batch made for the comparison, for the traced step
        self.refused: str | None = None  # why later steps were traced, when they were
        self.copied = 0  # steps copied
        self._start: int | None = None  # step 1's first event
        self._end: int | None = None  # the event after step 1's passes
        # the batch leaves step 1's value answers read, with step 1's values
        self._values: dict[int, torch.Tensor] = {}
        self._counts: dict[str, int] = {}
        self._grads: list[_Grad] | None = None
        self._micro: list[_MicroStart] = []  # step 1's first two micro-batches, as each began
        self._micro_asked = False  # once: a refused third is traced, and those after it
        self.copied_micro_batches = 0

    def batches(self, make: Callable[[], Any], leaves: Callable[[Any], list[Any]]) -> Any:
        """The batch factory the steps should call: ``make``, but a batch made to compare
        with step 1's and found different is the one the traced step gets (a second call
        could give it another)."""
        self._make, self._leaves = make, leaves

        def batch() -> Any:
            return self._pending.pop() if self._pending else make()

        return batch

    # -- step 1, watched ---------------------------------------------------------------------
    def phase(self, name: str) -> None:
        """Called as each phase starts, before the trace's own phase hook."""
        if name == _FIRST + "input" and self._start is None:  # its first micro-batch
            self._start = len(self._rec.events)
            self._shadows.depends = set()
            self._counts = self._tallies.read()
        if name == _FIRST + "input" and self._end is None and len(self._micro) < 2:
            self._micro.append(self._micro_start())

    def _micro_start(self) -> _MicroStart:
        costs = self._rec.costs
        ops = {} if costs is None else {k: len(v.ops) for k, v in costs.phases.items()}
        return _MicroStart(len(self._rec.events), ops, self._tallies.read())

    def after_backward(self, model: nn.Module) -> None:
        """Step 1's passes end here in training: its gradients are what they leave."""
        if self._end is None and self._start is not None:
            self._finish_passes(model)

    def _finish_passes(self, model: nn.Module | None) -> None:
        self._end = len(self._rec.events)
        self._values = {i: self._shadows.batch_values[i] for i in self._shadows.depends}
        now = self._tallies.read()
        self._counts = {k: v - self._counts.get(k, 0) for k, v in now.items()}
        self._grads = [] if model is None else self._gradients(model)

    def _gradients(self, model: nn.Module) -> list[_Grad] | None:
        """Each parameter's gradient, or None if one is not a whole storage of its own."""
        grads: list[_Grad] = []
        blocks: set[int] = set()
        with torch._C.DisableTorchFunction():
            for p in {id(p): p for p in model.parameters()}.values():
                g = p.grad
                if g is None:
                    continue
                block = self._rec.block_of(g)
                span = _span(tuple(g.shape), g.stride()) * g.element_size()
                if (
                    block is None
                    or block in blocks
                    or g.storage_offset() != 0
                    or g.untyped_storage().nbytes() != span
                ):
                    return None
                blocks.add(block)
                grads.append(_Grad(p, block, tuple(g.shape), g.stride(), g.dtype))
        return grads

    # -- step 1's micro-batches after the second, copied ------------------------------------
    def repeat_micro_batches(self, step: int, count: int) -> bool:
        """Copy step 1's second micro-batch ``count`` times as its next ones; False when it does
        not show they would be the same (they are traced)."""
        if self._micro_asked or not self.enabled or step != 1 or len(self._micro) != 2:
            return False
        self._micro_asked = True
        start, end = self._micro[1].event, len(self._rec.events)
        values = {i: self._shadows.batch_values[i] for i in self._shadows.depends}
        if values and not self._same_values(values):
            return False
        allocated, freed = self._blocks(start, end)
        if not freed <= allocated or allocated - freed - self._rec.persistent:
            return False  # it freed memory from before it, or kept some
        self._pending.clear()  # the batch compared is the copied micro-batch's
        added = self._counts_since(self._micro[1])
        ops = self._ops_since(self._micro[1])
        for _ in range(count):
            self._copy_events(start, end, lambda name: name)
            self._tallies.add(added)
            if self._rec.costs is not None:
                for name, more in ops.items():
                    self._rec.costs.phases[name].ops.extend(more)
        self.copied_micro_batches += count
        return True

    def _counts_since(self, mark: _MicroStart) -> dict[str, int]:
        now = self._tallies.read()
        return {k: v - mark.tallies.get(k, 0) for k, v in now.items()}

    def _ops_since(self, mark: _MicroStart) -> dict[str, list[Any]]:
        costs = self._rec.costs
        if costs is None:
            return {}
        return {
            name: list(cost.ops[mark.ops.get(name, 0) :])
            for name, cost in costs.phases.items()
            if name.startswith(_FIRST) and len(cost.ops) > mark.ops.get(name, 0)
        }

    # -- later steps, copied -----------------------------------------------------------------
    def repeat(self, step: int, model: nn.Module, train: bool) -> bool:
        """Copy step 1's passes as step ``step``'s; False (and :attr:`refused` says why) when
        step 1 does not show they would be the same."""
        if not self.enabled or step < 2 or self._start is None:
            return False
        if self._end is None:  # inference: step 1 ran to here
            self._finish_passes(None)
        why = self._why_not(train)
        if why is not None:
            self.refused, self.enabled = why, False
            return False
        self._pending.clear()  # the batch compared is the copied step's
        self._copy(step)
        self._tallies.add(self._counts)
        self.copied += 1
        return True

    def _why_not(self, train: bool) -> str | None:
        assert self._start is not None and self._end is not None
        if self._values and not self._same_values(self._values):
            return "the batch differs from step 1's where values were read"
        if self._grads is None:
            return "a gradient shares its storage"
        allocated, freed = self._blocks(self._start, self._end)
        if not freed <= allocated:
            return "step 1 frees memory allocated before it"
        grads = {g.block for g in self._grads}
        if allocated - freed != grads | (allocated & self._rec.persistent):
            return "step 1 keeps memory other than its gradients"
        if allocated & self._rec.live_blocks() - self._rec.persistent:
            return "memory of step 1 is still held"
        if train and any(g.param.grad is not None for g in self._grads):
            return "gradients were not set to None"
        return None

    def _blocks(self, start: int, end: int) -> tuple[set[int], set[int]]:
        """The blocks events ``start:end`` allocate, and those they free."""
        events = self._rec.events[start:end]
        allocated = {e.block for e in events if e.kind == "alloc"}
        return allocated, {e.block for e in events if e.kind == "free"}

    def _same_values(self, values: dict[int, torch.Tensor]) -> bool:
        """Whether the next batch holds ``values`` (step 1's, where it read them)."""
        if self._make is None:
            return False
        self._rec.suspended += 1  # made with no events: the step's own input phase has them
        try:
            made = self._make()
            leaves = self._leaves(made)
        finally:
            self._rec.suspended -= 1
        on_device = any(isinstance(t, torch.Tensor) and t.device.type == "meta" for t in leaves)
        if on_device:  # its memory was not recorded: the traced step makes its own batch
            return False
        self._pending.append(made)
        with _disable_current_modes(), torch._C.DisableTorchFunction():  # not the trace's ops
            for i, value in values.items():
                new = leaves[i] if i < len(leaves) else None
                if not (
                    isinstance(new, torch.Tensor)
                    and new.device.type == "cpu"
                    and new.shape == value.shape
                    and new.dtype == value.dtype
                    and torch.equal(new, value)
                ):
                    return False
        return True

    def _copy(self, step: int) -> None:
        """Step 1's events again, from new blocks, under step ``step``'s phase names."""
        assert self._start is not None and self._end is not None and self._grads is not None
        prefix = f"step{step}."
        blocks, marks = self._copy_events(
            self._start, self._end, lambda name: prefix + name[len(_FIRST) :]
        )
        if self._rec.costs is not None:
            self._rec.costs.copy((_FIRST + name[len(prefix) :], name) for name in marks)
        self._give_gradients(blocks)

    def _copy_events(
        self, start: int, end: int, rename: Callable[[str], str]
    ) -> tuple[dict[int, int], list[str]]:
        """Events ``start:end`` again, each allocation a new block, under the phase names
        ``rename`` gives step 1's: the new blocks by the old, and the phases set."""
        rec = self._rec
        marks = [
            (i, rename(name))
            for name, i in self._phases
            if name.startswith(_FIRST) and start <= i < end
        ]
        blocks: dict[int, int] = {}
        moved: list[int | None] = [None] * (end - start)  # where each event went (its call's site)
        at = 0
        for index in range(start, end):
            while at < len(marks) and marks[at][0] <= index:
                self._set_phase(marks[at][1])
                at += 1
            event = rec.events[index]
            if event.kind == "free":
                moved[index - start] = len(rec.events)
                rec.free(blocks[event.block])
            elif event.block not in rec.persistent:
                assert event.info is not None
                info = rec.infos[event.info]
                phase = rename(info.phase)
                moved[index - start] = len(rec.events)
                blocks[event.block] = rec.copy_alloc(event, dataclasses.replace(info, phase=phase))
        for _, name in marks[at:]:
            self._set_phase(name)
        if rec.calls is not None:
            rec.calls.copied(start, moved, len(rec.events), rename)
        return blocks, [name for _, name in marks]

    def _give_gradients(self, blocks: dict[int, int]) -> None:
        """Gradients for the optimizer, standing for the copied backward's (no new events)."""
        assert self._grads is not None
        self._rec.suspended += 1
        try:
            with torch._C.DisableTorchFunction():
                made: list[tuple[_Grad, Any]] = [
                    (g, torch.empty_strided(g.shape, g.stride, dtype=g.dtype, device="meta"))
                    for g in self._grads
                ]
        finally:
            self._rec.suspended -= 1
        for g, t in made:
            g.param.grad = t
            self._rec.adopt(t, blocks[g.block])
