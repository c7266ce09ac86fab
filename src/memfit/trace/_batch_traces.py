"""One configuration's traces by batch size, for a search that asks many: traced until a batch
model fits (``_batch_model``), derived from it after, traced again where a derived answer would
be returned.

A search over batch sizes (the batch-size finder, the planner's micro-batch bisection) asks
:meth:`BatchTraces.trace` for each batch it weighs. The first are traced, each with its kernel
calls logged; once :data:`SAMPLES` of them at batches of at least ``MIN_BATCH`` match event by
event (``_batch_fit.fit_batch_model``), later batches are derived from them in milliseconds
instead of traced in seconds. Two samples make the lines; what checks them is the trace of the
answer the search returns, which is always made (:meth:`verify`): where it differs from its
derivation in anything, the model is dropped and every later batch is traced (the caller then
searches again on traces). Two samples rather than three: a search asks three to five batch
sizes, so a third sample made before any derivation would leave nothing to derive. A batch the
model cannot answer (one, or one where a kernel allocates otherwise than at the samples) is
traced, and a trace that does not match the samples is kept as a sample of its own. :meth:`summary`
says in a sentence what was traced, what was derived, and why the model was not used where it
was not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from memfit.trace._batch_fit import fit_batch_model, same_trace
from memfit.trace._batch_model import MIN_BATCH, BatchModel, BatchRefusal
from memfit.trace._tracer import Trace

__all__ = ["BATCH_MODEL", "SAMPLES", "BatchTraces"]

BATCH_MODEL = True  # derive traces from a batch model where one fits (off: every batch traced)
SAMPLES = 2  # traces a model is fitted on (the answer's trace checks it: verify)


@dataclass
class BatchTraces:
    """Traces of one configuration by batch size (``trace_at(b, calls)`` traces it, with its
    kernel calls logged where ``calls``: a trace that may be a sample); :meth:`trace` derives
    those a batch model can answer."""

    trace_at: Callable[[int, bool], Trace]
    samples: int = SAMPLES
    enabled: bool = field(default_factory=lambda: BATCH_MODEL)
    traced: list[int] = field(default_factory=list)  # batches traced, in order
    derived: list[int] = field(default_factory=list)  # batches derived, in order
    checked: dict[int, bool] = field(default_factory=dict)  # derived, then traced: the same?
    model: BatchModel | None = None
    fitted: tuple[int, ...] = ()  # the batches the model was fitted on
    refusal: str | None = None  # why the last fit failed, or why the model was dropped
    skipped: dict[int, str] = field(default_factory=dict)  # batch -> why the model passed it
    _kept: dict[int, Trace] = field(default_factory=dict)  # traces to fit a model on
    _dropped: bool = False

    def trace(self, batch: int) -> Trace:
        """The trace at ``batch``: derived where the model answers it, else traced. A model is
        fitted here, once another batch is asked for (a search that asks no more pays no fit)."""
        if self.model is None and len(self._kept) >= self.samples:
            self._fit()
        if self.model is not None:
            derived = self.model.trace_at(batch)
            if isinstance(derived, Trace):
                self.derived.append(batch)
                return derived
            self.skipped[batch] = derived.reason
        return self.traced_at(batch)

    def traced_at(self, batch: int) -> Trace:
        """A trace at ``batch`` (never derived), kept as a sample while no model fits."""
        sample = self.enabled and not self._dropped and self.model is None and batch >= MIN_BATCH
        trace = self.trace_at(batch, sample)
        self.traced.append(batch)
        if sample:
            self._kept[batch] = trace
        return trace

    def verify(self, batch: int, derived: Trace) -> Trace:
        """A trace at ``batch``, whose derived trace was ``derived``: where the two differ,
        the model is dropped (every later batch is traced) and :attr:`refusal` says where."""
        trace = self.trace_at(batch, False)
        self.traced.append(batch)
        why = same_trace(derived, trace)
        self.checked[batch] = why is None
        if why is not None:
            self.model, self._dropped, self._kept = None, True, {}
            self.refusal = f"the trace at batch {batch} differs from its derivation: {why}"
        return trace

    def _fit(self) -> None:
        """A model from the kept traces: all of them, else the newest with those kept just
        before it (an older one may belong to a part of the range where a kernel or the model
        ran otherwise)."""
        batch = next(reversed(self._kept))
        others = [b for b in reversed(self._kept) if b != batch]
        tries = [[batch, *others]]
        if len(others) >= self.samples:
            tries.append([batch, *others[: self.samples - 1]])
        for batches in tries:
            fit = fit_batch_model({b: self._kept[b] for b in batches})
            if not isinstance(fit, BatchRefusal):
                self.model, self.fitted, self._kept, self.refusal = fit, fit.batches, {}, None
                return
            self.refusal = fit.reason
        # only the newest is kept (with the samples - 2 before it): a later trace may match it
        self._kept = {b: self._kept[b] for b in [*others[: self.samples - 2], batch][::-1]}

    def summary(self) -> str:
        """What was traced and what derived, in a sentence ("" where no model was tried)."""
        if not self.enabled or not (self.derived or self.refusal):
            return ""
        out = []
        if self.derived:
            out.append(
                f"{_batches(self.derived)} replayed through the allocator from a batch model of "
                f"the traces at {_sizes(self.fitted)} (matched event by event; each size linear "
                "in the batch or asked again of its kernel's rule)"
            )
        out.append(f"traced: {_sizes([b for b in self.traced if b not in self.checked])}")
        same = [b for b, ok in self.checked.items() if ok]
        other = [b for b, ok in self.checked.items() if not ok]
        if same:
            out.append(f"{_batches(same)} traced again to check the replay: the same")
        if other:
            out.append(f"{_batches(other)} traced again to check the replay: not the same")
        out += [f"{why} (traced)" for _, why in sorted(self.skipped.items())]
        if self.refusal is not None:
            out.append(("no batch model: " if not self.derived else "then ") + self.refusal)
        return "; ".join(out)


def _batches(batches: list[int]) -> str:
    return ("batch size " if len(set(batches)) == 1 else "batch sizes ") + _sizes(batches)


def _sizes(batches: list[int] | tuple[int, ...]) -> str:
    return ", ".join(str(b) for b in sorted(set(batches))) or "none"
