"""The fixes of an out-of-memory report: the incident's facts handed to the advice of
:mod:`memfit.planner`, which ranks them by the bytes each is expected to save."""

from __future__ import annotations

from memfit.advice import Failure, Fix, ModelInfo, failure_fixes
from memfit.oom._incident import Incident
from memfit.snapshot import SnapshotReport

__all__ = ["command_line", "failure_of", "rank_fixes"]


def command_line(incident: Incident) -> str:
    """The failing program's command line, as a user would type it."""
    argv = list(incident.argv) or ["train.py"]
    if argv[0].endswith(".py") or argv[0] in ("-", "-c", "-m"):
        argv.insert(0, "python")
    return " ".join(argv)


def failure_of(incident: Incident, analysis: SnapshotReport | None = None) -> Failure:
    """The facts of ``incident`` that decide the advice, with the allocator what-ifs of its
    trace when ``analysis`` replayed them."""
    model = incident.model
    info = None
    if model is not None:
        info = ModelInfo(
            parameter_bytes=model.parameter_bytes,
            fp32_bytes=model.fp32_bytes,
            optimizer=model.optimizer,
            optimizer_fused=model.optimizer_fused,
            checkpointing=model.checkpointing,
            huggingface=model.huggingface,
        )
    replayed = None
    if analysis is not None:
        replayed = tuple(r for r in analysis.what_if if not r.recorded)
    return Failure(
        shortfall=incident.shortfall,
        working_set=incident.activations,
        training=incident.grad_enabled is not False,
        in_optimizer_step=incident.phase == "optimizer step",
        autocast=incident.autocast,
        expandable=incident.expandable,
        stranded=incident.fragmentation,
        command=command_line(incident),
        model=info,
        replayed=replayed,
    )


def rank_fixes(
    incident: Incident, analysis: SnapshotReport | None = None
) -> tuple[list[Fix], list[str]]:
    """The fixes that apply, largest expected saving first, and notes on those left out."""
    return failure_fixes(failure_of(incident, analysis))
