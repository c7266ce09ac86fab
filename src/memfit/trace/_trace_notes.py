"""What a trace assumed or answered, in words for the estimate's notes (beside the compile's
and the rank's, which their own modules word)."""

from __future__ import annotations

from typing import Any

from memfit._units import format_bytes
from memfit.trace._copy_lane import CopyLane
from memfit.workload import Workload

__all__ = ["held_batch_note", "trace_notes"]


def trace_notes(
    workload: Workload,
    session: Any,
    lanes: list[CopyLane],
    held: int = 0,
) -> list[str]:
    """What the trace assumed or answered, beside the compile's and the rank's notes
    (``lanes``: the techniques' side-stream copies; ``held``: the bytes of the batch the caller
    holds)."""
    notes: list[str] = []
    if held:
        notes.append(held_batch_note(held))
    notes += [lane.note() for lane in lanes]
    if workload.step_fn is not None:
        notes += _step_notes(workload, session.user_autocast)
    notes += [f"attention ran {n} x {b}" for b, n in sorted(session.backends.items())]
    notes += sorted(set(session.shadows.guesses))
    notes += session.shadows.routing.notes(asked=workload.moe_routing)
    notes += session.recorder.kernels.convolutions.notes()
    notes += sorted(session.rnn_notes)
    notes += sorted(session.kernel_notes)
    return notes


def held_batch_note(held: int) -> str:
    """The note on the ``held`` bytes of batch the step's caller holds (``batch_held``)."""
    return (
        f"the step's caller holds its whole batch on the GPU through the step "
        f"({format_bytes(held)}, counted from the first step on; batch_held)"
    )


def _step_notes(workload: Workload, autocast: set[str]) -> list[str]:
    """What the user's step decided that the settings do not show."""
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[workload.precision]
    ran = (
        f"under torch.autocast ({', '.join(sorted(autocast))})" if autocast else "without autocast"
    )
    return [f"your step function ran as written, {ran}, on {dtype} parameters"]
