"""Measured savings of the model-side changes, as shares of a step's working set.

The *working set* is the memory a step holds beyond the parameters, gradients and optimizer
state: activations, saved tensors and temporaries. The factors below were measured on an H200
with torch 2.11 (``benchmarks/results/2026-11-30-h200-estimate-accuracy``); advice made when a
step has already failed (the OOM report, the micro-batch guard) applies them to the working set
at the failure.
``memfit estimate`` predicts each change exactly, before a run.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CHECKPOINTING", "MICROBATCH_SPLITS", "MIXED_PRECISION", "Factor"]


@dataclass(frozen=True, slots=True)
class Factor:
    """The share of the working set a change saves, what it costs, and where it was measured."""

    share: float
    cost: str
    source: str

    def of(self, working_set: int) -> int:
        """The bytes saved of ``working_set``."""
        return int(self.share * working_set)


CHECKPOINTING = Factor(
    share=0.6,
    cost="~25% more step time",
    source=(
        "activation checkpointing kept 41% of the working set of BERT-base (b32, s512, fp32, "
        "AdamW: 14.79 -> 6.06 GiB), for ~25% more step time (278 -> 350 ms)"
    ),
)
MIXED_PRECISION = Factor(
    share=0.3,
    cost="usually faster",
    source=(
        "bf16 autocast saved 28% of the working set of BERT-base and 48% of ResNet-50's (b64), "
        "less the 16-bit weight copies autocast keeps (half the fp32 parameter bytes)"
    ),
)
# a micro-batch k times smaller keeps ~1/k of the working set (activations scale with the
# batch); the splits tried, smallest first
MICROBATCH_SPLITS = (2, 4, 8, 16)
