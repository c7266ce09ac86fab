"""``host_optimizer``: its option, what it refuses, its notes, its place in a plan and its time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memfit._errors import InvalidInputError
from memfit._units import format_bytes
from memfit.technique._base import Option, Place, Settings, StepFacts, Technique, Undo

if TYPE_CHECKING:
    from torch import nn

__all__ = ["HOST_ADAM_ELEMENTS_PER_S", "TECHNIQUE", "HostOptimizer"]

# the host's fused AdamW, parameter elements stepped per second: torch 2.11's CPU kernel on the
# 16 cores of an H100 machine, fp32, 64 tensors of 1 Mi elements
# (benchmarks/results/2026-12-07-h100-host-adam-rate/; the 2-core development machine: 1.0e9)
HOST_ADAM_ELEMENTS_PER_S = 2.9e9

_NOTE = (
    "the optimizer steps on the host (host_optimizer): its states ({states}) and its step's "
    "temporaries are host memory, not the GPU's; each step copies the gradients to pinned host "
    "memory, frees them on the GPU, steps there and copies the parameters back. Host memory: "
    "{host} (a pinned copy of each trained parameter and of its gradient, and the states)"
)


class HostOptimizer(Technique):
    """The optimizer's states and step on the host (see the package's docstring)."""

    name = "host_optimizer"
    option = Option(
        keyword="host_optimizer",
        flag="--host-optimizer",
        kind=bool,
        help="keep the optimizer's states in host memory and step it there (one GPU)",
    )
    default = False

    def check(self, value: object) -> bool:
        if not isinstance(value, bool):
            raise InvalidInputError(
                f"host_optimizer={value!r} is not True or False: give True to keep the "
                "optimizer's states on the host and step it there."
            )
        return value

    def refusal(self, value: Any, settings: Settings) -> str | None:
        if not value:
            return None
        why = _conflict(settings)
        if why is None:
            return None
        return (
            f"host_optimizer=True cannot go with {why}. Drop host_optimizer, or the other setting."
        )

    def engage(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Any:
        if optimizer is not None:
            self.apply(value, model, optimizer, place)  # for the whole run: never undone
        return optimizer

    def host_bytes(self, value: Any, optimizer: Any) -> int:
        from memfit.technique.host_optimizer._stepping import host_stepping_of

        return sum(h.host_bytes() for h in host_stepping_of(optimizer))

    def notes(self, value: Any, settings: Settings, optimizer: Any) -> list[str]:
        if not value:
            return []
        from memfit.technique.host_optimizer._stepping import host_stepping_of

        stepping = list(host_stepping_of(optimizer))
        states = sum(s.state_bytes() for s in stepping)
        host = sum(s.host_bytes() for s in stepping)
        return [_NOTE.format(states=format_bytes(states), host=format_bytes(host))]

    def words(self, value: Any) -> str:
        return "optimizer on the host"

    def axis(self, settings: Settings) -> tuple[Any, ...]:
        return () if _conflict(settings) else (True,)

    def saving(self, value: Any, trained_elements: int, settings: Settings) -> int:
        # AdamW's two states and, at most, three parameters' worth of its step's temporaries
        per = 2 if settings.precision in ("bf16", "fp16") else 4
        return trained_elements * per * 5 if value else 0

    def step_seconds(self, value: Any, facts: StepFacts) -> float:
        if not value:
            return 0.0
        nbytes = facts.trained_elements * facts.param_bytes
        copies = facts.copy_seconds("d2h", nbytes) + facts.copy_seconds("h2d", nbytes)
        return copies + facts.trained_elements / HOST_ADAM_ELEMENTS_PER_S

    def apply(self, value: Any, model: nn.Module, optimizer: Any, place: Place) -> Undo:
        from memfit.technique.host_optimizer._stepping import HostStepping, each_optimizer

        if not value:
            return lambda: None
        stepping = [HostStepping(one, place) for one in each_optimizer(optimizer)]

        def undo() -> None:
            for s in reversed(stepping):
                s.undo()

        return undo


def _conflict(settings: Settings) -> str | None:
    """The other setting that host stepping cannot go with, in words; None where there is
    none."""
    optimizer = str(settings.optimizer)
    if settings.mode != "train":
        return f"mode={settings.mode!r} (an inference step has no optimizer)"
    if settings.strategy is not None:
        return (
            f"strategy={settings.strategy!r} (a data-parallel job offloads its own way: "
            "offload_shards=True for FSDP2, ZeRO-Offload for DeepSpeed)"
        )
    if optimizer.endswith("-in-backward"):
        return f"optimizer={optimizer!r} (it steps each parameter on the GPU during backward)"
    if optimizer.endswith("-8bit"):
        return f"optimizer={optimizer!r} (bitsandbytes steps its 8-bit states on the GPU)"
    if settings.precision == "fp16-mixed":
        return "precision='fp16-mixed' (GradScaler unscales the gradients on the GPU)"
    return None


TECHNIQUE = HostOptimizer()
