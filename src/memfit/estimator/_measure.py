"""Run a workload on a real GPU and read what the caching allocator and NVML say.

This is the ground truth an estimate is checked against (``memfit validate``). The workload
runs exactly the loop the trace runs (:func:`memfit.workload._step.run_steps`).
"""

from __future__ import annotations

import dataclasses
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

from memfit._errors import NoGPUError
from memfit.estimator._versions import Versions, installed_versions
from memfit.technique import GpuPlace
from memfit.technique.compilation import compiled_with_budget
from memfit.technique.data_parallel import FAKE_RANK_NOTE, parallel_group
from memfit.trace import CompileGuard
from memfit.workload import (
    StepHooks,
    Workload,
    engage,
    held_view_on,
    optimizer_for,
    prepare_model,
    run_steps,
)

__all__ = ["Measurement", "measure"]


@dataclass(frozen=True)
class Measurement:
    """Peaks of one real run, in bytes."""

    peak_allocated: int
    peak_reserved: int
    setup_allocated: int  # model (and optimizer) before the first step
    nvml_process: int | None  # the process's memory as nvidia-smi shows it, at the end
    context: int | None  # nvml_process - reserved at the end: CUDA context and libraries
    step_seconds: float
    gpu_name: str
    torch_version: str
    allocator_config: str
    versions: Versions  # of the machine that measured: torch, transformers, timm, torchvision
    notes: tuple[str, ...] = ()  # what the measurement is not (a rank alone, say)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _nvml_process_memory() -> int | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        index = torch.cuda.current_device()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pid = os.getpid()
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == pid and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
    except pynvml.NVMLError:
        return None
    return None


def measure(workload: Workload, *, record_history: bool = False) -> tuple[Measurement, Any]:
    """Run ``workload`` on the current CUDA device; returns the measurement and, if asked, the
    allocator snapshot with its trace (``torch.cuda.memory._snapshot()``)."""
    if not torch.cuda.is_available():
        raise NoGPUError("No CUDA GPU is available here; memfit validate needs one.")
    torch.cuda.empty_cache()
    if record_history:
        torch.cuda.memory._record_memory_history(
            context=None, stacks="python", max_entries=2_000_000
        )
    # compiled="eager": the GPU runs the uncompiled step too, so that like is compared with like
    guard = CompileGuard(workload, lambda: "setup") if workload.compiled == "eager" else None
    # a compiled model compiles at its first call: with the workload's activation memory budget
    active = guard.active() if guard is not None else nullcontext()
    group = parallel_group(workload.strategy, workload.world_size, "cuda")
    with active, compiled_with_budget(workload.activation_memory_budget), group:
        measured, snapshot = _run(workload, record_history, guard)
    if workload.strategy is not None and workload.world_size > 1:
        note = FAKE_RANK_NOTE.format(world_size=workload.world_size)
        measured = dataclasses.replace(measured, notes=(*measured.notes, note))
    return measured, snapshot


def _run(
    workload: Workload, record_history: bool, guard: CompileGuard | None
) -> tuple[Measurement, Any]:
    model = prepare_model(workload, "cuda")
    if guard is not None:
        model = guard.checked_model(model)
    optimizer = optimizer_for(workload, model)
    model, optimizer = engage(workload, model, optimizer, GpuPlace())
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    setup = torch.cuda.memory_allocated()

    def to_device(batch: Any) -> Any:
        return tree_map(lambda t: t.to("cuda") if isinstance(t, torch.Tensor) else t, batch)

    hooks = StepHooks(
        to_device=to_device,
        autocast=lambda dtype: torch.autocast("cuda", dtype=dtype),
        grad_scaler=lambda: torch.amp.GradScaler("cuda"),
    )
    # the caller's batch, held through the steps as the trace holds it (``batch_held``)
    hooks.held_view = held_view_on(workload, "cuda")
    start = time.perf_counter()
    run_steps(workload, model, optimizer, hooks)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / workload.steps
    snapshot = torch.cuda.memory._snapshot() if record_history else None
    if record_history:
        torch.cuda.memory._record_memory_history(enabled=None)
    hooks.held_view = None  # the caller's batch let go
    nvml = _nvml_process_memory()
    reserved_now = torch.cuda.memory_reserved()
    result = Measurement(
        peak_allocated=torch.cuda.max_memory_allocated(),
        peak_reserved=torch.cuda.max_memory_reserved(),
        setup_allocated=setup,
        nvml_process=nvml,
        context=None if nvml is None else nvml - reserved_now,
        step_seconds=seconds,
        gpu_name=torch.cuda.get_device_name(),
        torch_version=torch.__version__,
        allocator_config=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        versions=installed_versions(),
    )
    return result, snapshot
