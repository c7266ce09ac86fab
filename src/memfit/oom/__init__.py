"""Explain a CUDA out-of-memory error when it happens, with no change to the program.

>>> import memfit
>>> with memfit.oom_report("oom"):          # doctest: +SKIP
...     train()

or ``memfit run --oom-dir oom -- python train.py``. On ``torch.OutOfMemoryError`` the
directory gets, per error, ``oom-<time>-pid<pid>``:

* ``.pickle``: ``torch.cuda.memory._snapshot()`` taken at the failure (for
  ``memfit snapshot`` or https://pytorch.org/memory_viz), with the allocator's trace when
  ``record_history`` is on;
* ``.md``: the report: what was being allocated, where (the Python stack, the phase of the
  step), allocated / reserved / outside-PyTorch memory, fragmentation, the trace's peaks and
  allocation sites, and the fixes ranked by the bytes each is expected to save, each with its
  setting or command;
* ``.json``: the same, for machines.

Where the work happens (``_observer``'s docstring has the detail): the observer runs inside the
allocator's failure path, so it only reads cheap facts and saves the snapshot, makes no CUDA
allocation and never raises; the analysis (replays of the trace, ranking) runs after the error
has surfaced: when the ``with`` block exits, on ``close()``, at exit, or in ``memfit run``'s
parent process once the command has ended. CUDA is never initialised by memfit: the observer is
attached when the program initialises CUDA.

This package computes the report as data (:class:`OOMDiagnosis`) and renders nothing: the
functions that write reports take ``render``, the :data:`OOMRenderer` of the ``.md``.
``memfit.oom_report``, ``memfit run`` and the trainer callbacks pass
``memfit.report.oom_markdown``.
"""

from __future__ import annotations

from memfit.advice import Fix
from memfit.oom._diagnosis import OOMDiagnosis, OOMRenderer
from memfit.oom._finalize import ReportFiles, finalize_reports, write_report
from memfit.oom._fixes import command_line, rank_fixes
from memfit.oom._hook import OOMHook, oom_report
from memfit.oom._incident import Frame, Incident, read_incident
from memfit.oom._run import RunResult, run_with_report

__all__ = [
    "Fix",
    "Frame",
    "Incident",
    "OOMDiagnosis",
    "OOMHook",
    "OOMRenderer",
    "ReportFiles",
    "RunResult",
    "command_line",
    "finalize_reports",
    "oom_report",
    "rank_fixes",
    "read_incident",
    "run_with_report",
    "write_report",
]
