"""How long a traced step takes on a GPU: the planner's step-time model.

A step is the ops a trace kept in order (``trace.costs``: kind, FLOPs, bytes). The host issues
them one after the other, each costing it the seconds the calibration measured for an op of its
phase and kind of step (eager forward, autograd's backward, a checkpointed recompute, a selective
policy's dispatch mode...), a convolution call the extra of its phase and style on top
(``phase:conv:style``, eager's ``phase:conv``: cuDNN's per-call plan lookup, its batch norm's;
none in calibrations without it); the GPU runs each as soon as it is issued and the previous
kernel is done, for the seconds its own curve gives (matrix products, convolutions and
attention by their FLOPs, with their traffic as a floor; every other kernel by its bytes). A
convolution reads the curve of its shape class (``conv:k3s2:bf16``), or the nearest class
measured (:func:`_nearest_class`), or the general convolution curve of older calibrations. A
read-back (``.item()``) makes the host wait for the GPU; the step ends when both are done.
This is the two-queue model of eager PyTorch: a step of small ops is the host's time, one of
large ones the GPU's, and the overlap in between is what it is.

The rates come from :class:`Calibration`, measured once per GPU type
(``benchmarks/calibrate_gpu.py`` on the GPU, ``benchmarks/calibration_fit.py`` on its output)
and shipped in ``planner/data``. The model ranks configurations; its absolute times are checked
against the GPU in ``benchmarks/plan_proof.py``.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memfit._errors import InvalidInputError
from memfit._gpus import GPU
from memfit.planner.calibration._store import (
    gpu_key,
    read_calibration,
    saved,
    saved_state,
    shipped,
)
from memfit.technique import OptimizerVariant
from memfit.trace import Op, StepCosts, is_copy

__all__ = ["HOST_BOUND_NOTE", "Calibration", "StepTime", "calibration_for", "step_time"]

HOST_BOUND_NOTE = (
    "the chosen step waits on the host (Python issuing its many small kernels), not on the "
    "GPU: its seconds depend on the CPU that runs it (the same host-bound steps took up to "
    "2x longer on one H200 machine than on another); the ranking holds better than the "
    "seconds"
)

_MICRO = ("input", "forward", "backward")  # repeated once per micro-batch
_ORDER = ("input", "forward", "backward", "optimizer", "zero_grad")
# a family split from another since a calibration was fitted: timed as the one it came from there
# (a backward family, ``norm_bwd``, as its forward's)
_FAMILY_FALLBACK = {"cat_strided": "cat"}
_FIRST_RELIABLE = 12e-6  # shorter timings measured the host's launch, not the GPU
_CONVOLUTIONS = ("conv:", "conv_bwd:")  # the kinds of a convolution call, forward and backward
_OTHER_FLAGS = 10.0  # a depthwise/grouped/transposed class's distance to one without: farther
# than any kernel or stride (cuDNN's depthwise backward runs 8-10x below the dense rates)
_CLASS = re.compile(r"k(\d+(?:x\d+)*)(?:s(\d+(?:x\d+)*))?([a-z]*)")  # trace's conv_class


@dataclass(frozen=True)
class Calibration:
    """A GPU type's measured rates.

    ``curves``: per op kind, ``(work, seconds)`` points (FLOPs for arithmetic, bytes for
    ``mem``), sorted. ``kernel_floor``: the GPU's seconds for the smallest kernel. ``host``:
    the host's seconds per op by ``phase`` or ``phase:style`` (``backward:checkpointed``...),
    ``optimizer_param`` per parameter tensor (``optimizer_param:in-backward`` stepped in
    backward), ``phase:conv:style`` on top per convolution call
    (:meth:`host_per_conv`). ``graph_timed``: the curves timed inside CUDA graphs, whose short
    points are the GPU's too (others' are the host's launch).
    """

    gpu: str
    source: str  # where and when it was measured
    curves: dict[str, tuple[tuple[float, float], ...]]
    kernel_floor: float
    bandwidth: float  # bytes per second, the asymptote of ``mem``
    host: dict[str, float] = field(default_factory=dict)
    h2d: float = 0.0  # the host's seconds per byte copied to the GPU from pageable memory
    graph_timed: frozenset[str] = frozenset()
    mem_factors: dict[str, float] = field(default_factory=dict)
    # seconds per byte of a copy between pinned host memory and the GPU, by direction
    # (``d2h``, ``h2d``): activation offload's side stream; empty in older calibrations
    pinned: dict[str, float] = field(default_factory=dict)
    _chosen: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _factor: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(
            gpu=data["gpu"],
            source=data["source"],
            curves={
                k: tuple((float(w), float(t)) for w, t in v) for k, v in data["curves"].items()
            },
            kernel_floor=float(data["kernel_floor"]),
            bandwidth=float(data["bandwidth"]),
            host={k: float(v) for k, v in data["host"].items()},
            h2d=float(data.get("h2d_seconds_per_byte", 0.0)),
            graph_timed=frozenset(data.get("graph_timed", ())),
            mem_factors={k: float(v) for k, v in data.get("mem_factors", {}).items()},
            pinned={k: float(v) for k, v in data.get("pinned_seconds_per_byte", {}).items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """The calibration as :meth:`from_dict` reads it (the file ``calibrate`` writes)."""
        return {
            "gpu": self.gpu,
            "source": self.source,
            "curves": {k: [list(point) for point in v] for k, v in self.curves.items()},
            "kernel_floor": self.kernel_floor,
            "bandwidth": self.bandwidth,
            "host": dict(self.host),
            "h2d_seconds_per_byte": self.h2d,
            "graph_timed": sorted(self.graph_timed),
            "mem_factors": dict(self.mem_factors),
            "pinned_seconds_per_byte": dict(self.pinned),
        }

    def copy_seconds(self, direction: str, nbytes: int) -> float:
        """The side stream's seconds to copy ``nbytes`` between pinned host memory and the GPU
        (``direction`` ``d2h`` or ``h2d``)."""
        rate = self.pinned.get(direction)
        if rate is None:
            raise InvalidInputError(
                f"The step-time calibration of {self.gpu} ({self.source}) has no measured "
                "rate of copies between pinned host memory and the GPU, so offloaded steps "
                "cannot be timed. Measure it on the GPU (benchmarks/calibrate_gpu.py --only "
                "pinned) or plan without offload."
            )
        return self.kernel_floor + nbytes * rate

    def gpu_seconds(self, kind: str, flops: int, nbytes: int) -> float:
        """The GPU's seconds for one op."""
        if kind in ("view", "sync"):
            return 0.0
        if kind.startswith("mem"):
            return self.kernel_floor + self.mem_factor(kind) * nbytes / self.bandwidth
        traffic = self.kernel_floor + nbytes / self.bandwidth
        if not flops:
            return traffic
        key = self.curve_key(kind)
        reliable = 0.0 if key in self.graph_timed else _FIRST_RELIABLE
        return max(
            traffic, _interpolate(self.curves[key], float(flops), self.kernel_floor, reliable)
        )

    def mem_factor(self, kind: str) -> float:
        """How many times an elementwise kernel's seconds a memory-bound op of ``kind`` takes
        for its bytes: its family and dtype's factor (``mem:bn:bf16``), else its family's, else
        the elementwise kernels' (``mem``), else 1. A family a calibration does not know
        (``norm_bwd``, ``cat_strided``: split since it was fitted) is timed as the one it came
        from."""
        factor = self._factor.get(kind)
        if factor is None:  # looked up once per kind: every op of every candidate asks
            factor = self._factor[kind] = self._mem_factor(kind)
        return factor

    def _mem_factor(self, kind: str) -> float:
        factors = self.mem_factors
        family_dtype = kind.partition(":")[2]
        family, _, dtype = family_dtype.partition(":")
        family = family or "elementwise"
        if not any(k.partition(":")[0] == family for k in factors):
            # a calibration from before the family's split: the one it was split from
            older = _FAMILY_FALLBACK.get(family, family.removesuffix("_bwd"))
            family, family_dtype = older, f"{older}:{dtype}" if dtype else older
        return factors.get(family_dtype, factors.get(family, factors.get("elementwise", 1.0)))

    def host_seconds(self, phase: str, style: str) -> float:
        """The host's seconds to issue one op of ``phase`` in a step of ``style``."""
        host = self.host
        return host.get(f"{phase}:{style}", host.get(phase, host["default"]))

    def host_fixed(self, phase: str, style: str) -> float:
        """The host's seconds a phase of one micro-batch costs whatever its ops (a model's
        Python around its layers, the backward's start): ``phase:fixed:style``, else
        ``phase:fixed`` (eager's), else none (a calibration fitted without it)."""
        host = self.host
        return host.get(f"{phase}:fixed:{style}", host.get(f"{phase}:fixed", 0.0))

    def optimizer_param(self, variant: str = "") -> float:
        """The host's seconds per parameter tensor of an optimizer step (on top of its ops):
        a foreach or fused step loops over the tensors in Python; stepped in backward
        (``variant="in-backward"``), each tensor is a whole ``step()`` call of its own; 8-bit
        states (``"8bit"``, bitsandbytes) loop in Python with a kernel per tensor. A variant the
        calibration has not measured costs what the loop does."""
        host = self.host
        return host.get(f"optimizer_param:{variant}", host["optimizer_param"])

    def host_per_copy(self) -> float:
        """The host's seconds on top of an op's for each of activation offload's copies (its
        saved-tensor hooks' Python around the copy: a pinned buffer taken, the tensor kept);
        none in calibrations fitted before it."""
        return self.host.get("copy", 0.0)

    def host_per_conv(self, phase: str, style: str) -> float:
        """The host's seconds on top of :meth:`host_seconds` for a convolution call (forward
        or backward) in ``phase`` of a step of ``style``: ``phase:conv:style``, else
        ``phase:conv`` (eager's), else none (calibrations fitted before it, phases without
        convolutions)."""
        host = self.host
        return host.get(f"{phase}:conv:{style}", host.get(f"{phase}:conv", 0.0))

    def curve_key(self, kind: str) -> str:
        """The curve an op of ``kind`` is timed by: its own, else the nearest measured (a
        convolution's nearest shape class, bfloat16's for float16, the general convolution
        curve, a backward's forward), else ``mm:bf16``. Never fails."""
        chosen = self._chosen.get(kind)
        if chosen is None:
            chosen = next(k for k in self._candidates(kind) if k in self.curves)
            self._chosen[kind] = chosen
        return chosen

    def _candidates(self, kind: str) -> list[str]:
        parts = kind.split(":")
        family, dtype = parts[0], parts[-1]
        forward = family.removesuffix("_bwd")
        out = []
        if len(parts) == 3:  # a convolution's class: the nearest measured of its own family
            for fam in dict.fromkeys((family, forward)):
                for dt in dict.fromkeys((dtype, "bf16" if dtype == "fp16" else dtype)):
                    out.append(_nearest_class(parts[1], fam, dt, self.curves) or kind)
        plain = family.replace("_dropout", "")  # attention with dropout, where unmeasured
        return [
            *out,
            f"{family}:{dtype}",
            f"{plain}:{dtype}",
            f"{family}:bf16",  # fp16 where only bf16 was measured: the same tensor cores
            f"{forward}:{dtype}",  # a backward measured as its forward
            f"{family}:k3:{dtype}",  # an old-style kind against per-class curves
            f"mm:{dtype}",  # an unaligned product where only aligned ones were measured
            "mm:bf16",
        ]


@dataclass(frozen=True)
class StepTime:
    """A predicted step: its seconds, and how busy the host and the GPU were in it."""

    seconds: float
    gpu_busy: float
    host_busy: float
    phases: dict[str, float]  # seconds by phase (the micro-batch phases over all micro-batches)

    @property
    def bound(self) -> str:
        """Which side the step waits on: ``gpu`` or ``host`` (launch-bound)."""
        return "gpu" if self.gpu_busy >= self.host_busy else "host"


def step_time(
    costs: StepCosts,
    calibration: Calibration,
    *,
    style: str,
    step: int = 2,
    micro_batches: tuple[int, int] = (1, 1),
    variant: OptimizerVariant | None = None,
    batch_on_gpu: bool = False,
) -> StepTime:
    """The predicted time of step ``step`` of a trace.

    ``style`` picks the host's per-op costs: ``eager``, ``fp32``, ``checkpointed`` or
    ``selective``. ``micro_batches = (traced, wanted)``: the trace ran ``traced`` micro-batches
    per step and the step to predict runs ``wanted`` (the planner traces at most two and scales
    their input, forward and backward). ``variant``: the optimizer's variant, if its name asks
    for one (:func:`memfit.technique.optimizer_variant_of`): one that steps each parameter in
    backward does it inside the backward phase, and the host pays the variant's own
    :meth:`Calibration.optimizer_param` per parameter tensor (bitsandbytes' 8-bit states have
    theirs too). ``batch_on_gpu``: the step is given its
    batch on the GPU (the input phase, memfit's loop making the batch on the host and copying
    it, is left out: a user's data loader does that, beside the step).
    """
    traced, wanted = micro_batches
    during_backward = variant is not None and variant.steps_in_backward
    shown = [
        (phase, cost)
        for phase in _ORDER
        if (cost := costs.phases.get(f"step{step}.{phase}")) is not None
        and not (during_backward and phase == "optimizer")
        and not (batch_on_gpu and phase == "input")
    ]
    update = costs.phases.get(f"step{step}.optimizer") if during_backward else None
    key = variant.cost_key if variant is not None else ""
    issuer = _Issuer(costs, calibration, style, traced, update, during_backward, key)
    micro = [(phase, cost) for phase, cost in shown if phase in _MICRO]
    # the traced micro-batches run as many times as the step's need; a fraction of a repeat
    # counts that share of the last one's time
    repeats = wanted / traced
    last = repeats - math.ceil(repeats) + 1
    for n in range(math.ceil(repeats)):
        issuer.repeat(micro, last if n == math.ceil(repeats) - 1 else 1.0)
    for phase, cost in shown:
        if phase not in _MICRO:
            issuer.run(phase, cost)
    lane = issuer.lane
    return StepTime(lane.end, lane.busy, lane.host_busy, issuer.phases)


@dataclass
class _Issuer:
    """A step's phases issued one after another on one :class:`_Lane`: the host runs ahead of
    the GPU across phases (``loss.backward()`` starts while the forward's kernels still run)."""

    costs: StepCosts
    calibration: Calibration
    style: str
    traced: int
    update: Any  # the optimizer's ops, issued in backward (``during_backward``)
    during_backward: bool
    cost_key: str  # the optimizer variant's host cost per tensor (Calibration.optimizer_param)
    phases: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lane = _Lane(self.calibration)

    def run(self, phase: str, cost: Any, share: float = 1.0) -> None:
        lane, cal = self.lane, self.calibration
        before = lane.end
        if phase in _MICRO:
            lane.spend(cal.host_fixed(phase, self.style) * self.traced)
        lane.issue(cost.ops, phase, self.style, copies=phase == "input")
        if phase == "backward" and self.during_backward:
            # each parameter's update is issued as backward completes its gradient: on the
            # host between backward's ops, on the GPU between its kernels (the host's cost of
            # it hides under a GPU-bound backward). Scaled with backward: one micro-batch
            lane.issue(self.update.ops if self.update else [], "optimizer", self.style)
            lane.spend(self.costs.parameter_tensors * cal.optimizer_param(self.cost_key))
        if phase == "optimizer":
            lane.spend(self.costs.parameter_tensors * cal.optimizer_param(self.cost_key))
        self.phases[phase] = self.phases.get(phase, 0.0) + (lane.end - before) * share

    def repeat(self, micro: list[tuple[str, Any]], share: float) -> None:
        """The traced micro-batches' phases once more; only ``share`` of them counts."""
        lane = self.lane
        marks = (lane.end, lane.host_busy, lane.busy)
        for phase, cost in micro:
            self.run(phase, cost, share)
        if share < 1.0:  # take the rest back
            back = 1.0 - share
            lane.shift(-(lane.end - marks[0]) * back)
            lane.host_busy -= (lane.host_busy - marks[1]) * back
            lane.busy -= (lane.busy - marks[2]) * back


class _Lane:
    """One phase's timelines: the host issuing ops one after another, the GPU running each once
    it is issued and the one before it is done."""

    def __init__(self, calibration: Calibration) -> None:
        self.calibration = calibration
        self.host = self.gpu = self.busy = 0.0
        self.host_busy = 0.0  # the host's own seconds, without its waits for the GPU
        self.copy = 0.0  # activation offload's side stream: when its last copy is done
        self._events: dict[str, float] = {}

    def _side_stream(self, kind: str, nbytes: int, per_op: float) -> None:
        """One of activation offload's ops: a copy starts once the side stream is free and the
        compute stream has run what the host issued before it; a mark notes when the copies
        so far are done; a wait holds the compute stream's next kernel until then."""
        name, _, event = kind.partition(":")
        if name == "copy_mark":
            self._events[event] = self.copy
        elif name == "copy_wait":
            self.gpu = max(self.gpu, self._events.get(event, 0.0))
        else:
            self.spend(per_op + self.calibration.host_per_copy())
            start = max(self.copy, self.gpu, self.host)
            self.copy = start + self.calibration.copy_seconds(name, nbytes)

    def spend(self, seconds: float) -> None:
        """The host works ``seconds`` more."""
        self.host += seconds
        self.host_busy += seconds

    def shift(self, seconds: float) -> None:
        """Every clock moved by ``seconds``."""
        self.host += seconds
        self.gpu += seconds
        self.copy += seconds
        self._events = {k: v + seconds for k, v in self._events.items()}

    @property
    def end(self) -> float:
        """When the phase is done: the host, the GPU and the side stream's copies."""
        return max(self.host, self.gpu, self.copy)

    def issue(self, ops: list[Op], phase: str, style: str, *, copies: bool = False) -> None:
        """Issue ``ops`` of ``phase``; ``copies``: the batch copied from the host, which the
        host waits for."""
        cal = self.calibration
        per_op = cal.host_seconds(phase, style)
        per_conv = cal.host_per_conv(phase, style)
        for kind, flops, nbytes in ops:
            if is_copy(kind):
                self._side_stream(kind, nbytes, per_op)
                continue
            self.spend(per_op)
            if copies and kind.startswith("mem"):
                self.spend(nbytes / 2 * cal.h2d)  # read on the host, written on the GPU
                continue
            if kind == "sync":
                self.host = max(self.host, self.gpu)
                continue
            if per_conv and kind.startswith(_CONVOLUTIONS):
                self.spend(per_conv)
            run = cal.gpu_seconds(kind, flops, nbytes)
            if run:
                self.gpu = max(self.gpu, self.host) + run
                self.busy += run


def calibration_for(gpu: GPU, path: str | None = None) -> tuple[Calibration, str | None]:
    """The calibration the step times of ``gpu`` come from, and a note where it is not the
    measured one of ``gpu``'s type: the file ``path`` when given; else this machine's (``memfit
    calibrate``) of the type; else memfit's own of it; for a size (no type), this machine's
    newest; else the H200's. Read once for each state of the files."""
    return _calibration_for(gpu, path, saved_state(path))


@functools.cache
def _calibration_for(
    gpu: GPU, path: str | None, state: tuple[object, ...]
) -> tuple[Calibration, str | None]:
    if path is not None:
        data = read_calibration(path)
        return Calibration.from_dict(data), f"step times from {path} ({data['source']})"
    key, mine, ours = gpu_key(gpu), saved(), shipped()
    if key is not None and key in mine:
        data = mine[key]
        return Calibration.from_dict(data), (
            f"step times from this machine's calibration of the {data['gpu']} "
            f"({data['path']}: {data['source']})"
        )
    if key is not None and key in ours:
        return Calibration.from_dict(ours[key]), None
    if key is None and mine:
        data = max(mine.values(), key=lambda d: Path(d["path"]).stat().st_mtime)
        return Calibration.from_dict(data), (
            f"{gpu.name} names no GPU type: step times from this machine's newest calibration, "
            f"of the {data['gpu']} ({data['path']}: {data['source']})"
        )
    data = ours["h200"]
    what = "a size names no GPU type" if key is None else f"memfit has no rates of the {gpu.name}"
    note = (
        f"step times are the H200's ({data['source']}): {what}, so they rank the candidates "
        "where its rates are alike and their seconds are the H200's (`memfit calibrate` on "
        "your GPU measures its own)"
    )
    return Calibration.from_dict(data), note


def _nearest_class(
    wanted: str, family: str, dtype: str, curves: dict[str, tuple[tuple[float, float], ...]]
) -> str | None:
    """The curve ``family:<class>:dtype`` whose class is nearest ``wanted``: kernel and stride
    compared on a log scale (their largest side), a transposed or grouped convolution taking
    the nearest dense one; ``None`` when no class of ``family`` and ``dtype`` was measured."""
    target = _class_point(wanted)
    best: tuple[float, str] | None = None
    for key in curves:
        fam, _, rest = key.partition(":")
        cls, _, dt = rest.rpartition(":")
        if fam != family or dt != dtype or not cls:
            continue
        point = _class_point(cls)
        if target is None or point is None:
            distance = 0.0 if cls == wanted else (1.0 if cls == "k3" else 2.0)
        else:
            distance = (
                abs(math.log(target[0] / point[0]))
                + abs(math.log(target[1] / point[1]))
                + _flag_distance(target[2], point[2])
            )
        if best is None or (distance, key) < best:
            best = (distance, key)
    return best[1] if best is not None else None


def _flag_distance(wanted: str, measured: str) -> float:
    """How far two classes' flags are: none where equal, half where one adds to the other
    (``dwcl``, a channels-last depthwise convolution, is nearer ``dw`` than any dense one)."""
    if wanted == measured:
        return 0.0
    if wanted and measured and (wanted.startswith(measured) or measured.startswith(wanted)):
        return _OTHER_FLAGS / 2
    return _OTHER_FLAGS


def _class_point(cls: str) -> tuple[int, int, str] | None:
    """``k3s2dw`` as (3, 2, "dw"): the largest kernel side, the largest stride, the flags."""
    match = _CLASS.fullmatch(cls)
    if match is None:
        return None
    kernel, stride, flags = match.groups()
    sides = [int(n) for n in kernel.split("x")]
    strides = [int(n) for n in (stride or "1").split("x")]
    return max(max(sides), 1), max(max(strides), 1), flags


def _interpolate(
    curve: tuple[tuple[float, float], ...],
    work: float,
    floor: float,
    reliable: float = _FIRST_RELIABLE,
) -> float:
    """Seconds for ``work`` on a measured curve: log-log between points, a constant rate
    beyond them; points shorter than ``reliable`` (the host's launch, for curves timed
    eagerly) are left out."""
    points = [p for p in curve if p[1] >= reliable] or list(curve)
    works = [w for w, _ in points]
    i = bisect.bisect_left(works, work)
    if i == 0:
        w0, t0 = points[0]
        return max(floor, t0 * work / w0)
    if i == len(points):
        w1, t1 = points[-1]
        return t1 * work / w1
    (w0, t0), (w1, t1) = points[i - 1], points[i]
    f = (math.log(work) - math.log(w0)) / (math.log(w1) - math.log(w0))
    return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
