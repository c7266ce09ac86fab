"""Techniques that trade a step's speed for its memory, one package each, with the same hooks
(``Technique``): their option and its checks, what they do to the model and the optimizer
before the steps, the host memory they hold, their notes, their axis in the planner's search
and their time, and how they are applied to a live model. The registry (``TECHNIQUES``) is the
one list the rest of memfit reads.

Below the workload: a technique reads the other settings through ``Settings`` and holds its
tensors through a ``Place`` (a trace's or a real GPU's), never importing what is above it.
"""

from memfit._lazy import lazy_attributes
from memfit.technique._base import Option, Place, Settings, StepFacts, Technique, Undo
from memfit.technique._registry import (
    TECHNIQUES,
    active_techniques,
    checked_techniques,
    optimizer_variant_of,
    technique_aliases,
    technique_named,
    techniques_in,
    with_aliases,
)
from memfit.technique._variant import OptimizerVariant, check_fusable, element_bytes

__getattr__, __dir__ = lazy_attributes(__name__, {"GpuPlace": "_place"}, globals())

__all__ = [
    "TECHNIQUES",
    "GpuPlace",
    "OptimizerVariant",
    "Option",
    "Place",
    "Settings",
    "StepFacts",
    "Technique",
    "Undo",
    "active_techniques",
    "check_fusable",
    "checked_techniques",
    "element_bytes",
    "optimizer_variant_of",
    "technique_aliases",
    "technique_named",
    "techniques_in",
    "with_aliases",
]
