"""Estimates of one workload at many batch sizes: traced at a few, replayed at the rest.

The batch-size search (``memfit.find_batch_size``, ``memfit estimate --max-batch-size``) asks the
same step at several batch sizes. :class:`BatchEstimates` traces the first ones and, once a
batch model fits them (``memfit.trace.BatchTraces``), derives the trace of each later batch
from it and replays only the allocator: a whole estimate (peaks, breakdown, timeline, notes;
``Estimate.replayed_from`` names the sampled batches) in a fraction of a trace's time.
:meth:`BatchEstimates.traced` makes the estimate a caller returns from a trace at its own batch,
checking the derivation made there before (where they differ the model is dropped).
"""

from __future__ import annotations

from memfit._gpus import GPU, resolve_gpu
from memfit.estimator._estimate import _DEFAULT_GPU, estimate_workload
from memfit.estimator._gc import gc_frozen
from memfit.estimator._quiet import quiet_libraries
from memfit.estimator._result import Estimate
from memfit.trace import BatchTraces, Trace, trace_workload
from memfit.workload import Workload

__all__ = ["BatchEstimates"]


class BatchEstimates:
    """Estimates of ``workload`` (whose batch is a function of its size: ``batch_of``) by
    batch size; a batch model derives those it can (``memfit.trace.BatchTraces``)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.gpu: GPU = workload.gpu or resolve_gpu(_DEFAULT_GPU)
        self.traces = BatchTraces(self._trace)
        self._derived: dict[int, Trace] = {}

    def _trace(self, batch: int, calls: bool) -> Trace:
        with quiet_libraries(), gc_frozen():
            return trace_workload(
                self.workload.with_batch_size(batch), self.gpu, kernel_calls=calls
            )

    def estimate(
        self, batch: int, *, with_least_capacity: bool = False, capacity: int | None = None
    ) -> Estimate:
        """The estimate at ``batch``: replayed from a derived trace where the model answers,
        else traced (``estimate_workload``'s options)."""
        with gc_frozen():  # a derivation makes tens of thousands of objects too
            trace = self.traces.trace(batch)
        if trace.derived_from:
            self._derived[batch] = trace
        return self._estimate(batch, trace, with_least_capacity, capacity)

    def traced(
        self, batch: int, *, with_least_capacity: bool = False, capacity: int | None = None
    ) -> Estimate:
        """The estimate at ``batch`` from a trace at ``batch``; a derivation made there before
        is checked against it (:meth:`~memfit.trace.BatchTraces.verify`)."""
        derived = self._derived.pop(batch, None)
        if derived is None:
            trace = self.traces.traced_at(batch)
        else:
            trace = self.traces.verify(batch, derived)
        return self._estimate(batch, trace, with_least_capacity, capacity)

    def derived(self, batch: int) -> bool:
        """Whether the estimate last made at ``batch`` was replayed from a derived trace."""
        return batch in self._derived

    def _estimate(
        self, batch: int, trace: Trace, with_least_capacity: bool, capacity: int | None
    ) -> Estimate:
        return estimate_workload(
            self.workload.with_batch_size(batch),
            with_least_capacity=with_least_capacity,
            capacity=capacity,
            trace=trace,
        )

    def note(self) -> str:
        """What was traced and what replayed, in a sentence ("" where no model was tried)."""
        return self.traces.summary()
