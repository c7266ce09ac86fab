"""``memfit.estimate``: the predicted peak memory of a training or inference step.

trace (meta tensors) -> allocator emulation -> peaks, breakdown at the peak, timeline, verdict.
Runs on the CPU in seconds and never touches a GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit._events import Category
from memfit._gpus import GPU, resolve_gpu
from memfit.allocator import AllocatorConfig, CachingAllocator
from memfit.estimator._pressure import feed, least_capacity, retries_within
from memfit.estimator._result import Estimate, Timeline, WorkloadSummary
from memfit.trace import Trace, trace_workload
from memfit.workload._models import ModelRecipe, resolve_model
from memfit.workload._step import OptimizerSpec, Workload, default_loss, workload_for

__all__ = ["estimate", "estimate_workload"]

_DEFAULT_GPU = "h100"


def estimate(
    model: nn.Module | Callable[[], nn.Module] | str,
    batch: Any = None,
    *,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None,
    optimizer: OptimizerSpec = "adamw",
    precision: str = "fp32",
    mode: str = "train",
    activation_checkpointing: bool = False,
    allocator_config: str | None = None,
    gpu: GPU | str | int | None = None,
    batch_size: int | None = None,
    seq_len: int | None = None,
    steps: int | None = None,
) -> Estimate:
    """Predict the peak GPU memory of one workload, on the CPU.

    ``model`` is an ``nn.Module`` (real or meta weights), a zero-argument factory (built on the
    meta device, free), or a model name (``bert-base-uncased``, ``hf:...``, ``tv:resnet50``).
    ``batch`` is a tensor, tuple or dict (CPU or meta), or a zero-argument factory; for a model
    name give ``batch_size`` (and ``seq_len`` for text) instead.
    """
    gpu_spec = resolve_gpu(gpu) if gpu is not None else None
    name, workload = _workload(
        model,
        batch,
        loss_fn,
        optimizer,
        precision,
        mode,
        activation_checkpointing,
        batch_size,
        seq_len,
        steps,
    )
    return estimate_workload(
        workload,
        name=name,
        allocator_config=allocator_config or "",
        gpu=gpu_spec,
        batch_text=_batch_text(workload, batch_size, seq_len),
        tight_verdict=True,
    )


def _workload(
    model: Any,
    batch: Any,
    loss_fn: Any,
    optimizer: OptimizerSpec,
    precision: str,
    mode: str,
    checkpointing: bool,
    batch_size: int | None,
    seq_len: int | None,
    steps: int | None,
) -> tuple[str, Workload]:
    if isinstance(model, str):
        recipe: ModelRecipe = resolve_model(model)
        if batch is None:
            if batch_size is None:
                raise InvalidInputError(
                    f"Give a batch for {model!r}: batch_size= (and seq_len= for text models), "
                    "or batch= with example tensors."
                )
            work = workload_for(
                recipe,
                batch_size,
                seq_len,
                optimizer=optimizer,
                precision=precision,
                mode=mode,
                activation_checkpointing=checkpointing,
                steps=steps,
            )
            if loss_fn is not None:
                work = _replace(work, loss_fn=loss_fn)
            return recipe.name, work
        return recipe.name, Workload(
            recipe.build,
            _batch_factory(batch),
            loss_fn or recipe.loss_fn or default_loss,
            optimizer,
            precision,
            mode,
            checkpointing,
            recipe.enable_checkpointing,
            steps or (2 if mode == "train" else 1),
        )
    if batch is None:
        raise InvalidInputError("Give batch= (a tensor, tuple, dict, or a factory of one).")
    build = _model_factory(model)
    name = (
        type(model).__name__
        if isinstance(model, nn.Module)
        else getattr(model, "__name__", "model")
    )
    return name, Workload(
        build,
        _batch_factory(batch),
        loss_fn or default_loss,
        optimizer,
        precision,
        mode,
        checkpointing,
        _generic_checkpointing,
        steps or (2 if mode == "train" else 1),
    )


def _replace(work: Workload, **changes: Any) -> Workload:
    from dataclasses import replace

    return replace(work, **changes)


def _generic_checkpointing(model: nn.Module) -> None:
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if callable(enable):
        enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return
    setter = getattr(model, "set_grad_checkpointing", None)
    if callable(setter):
        setter(True)
        return
    raise InvalidInputError(
        f"memfit does not know how to switch on checkpointing for {type(model).__name__}: it "
        "has neither gradient_checkpointing_enable() nor set_grad_checkpointing(). Wrap its "
        "blocks in torch.utils.checkpoint.checkpoint and estimate without the flag."
    )


def _model_factory(model: Any) -> Callable[[], nn.Module]:
    if isinstance(model, nn.Module):
        template = model

        def rebuild() -> nn.Module:
            # same architecture, same parameter order, weights never copied
            import copy

            return copy.deepcopy(template) if _all_meta(template) else _meta_clone(template)

        return rebuild
    if callable(model):
        return model  # type: ignore[no-any-return]
    raise InvalidInputError(f"model={model!r} is not an nn.Module, a factory, or a model name.")


def _all_meta(model: nn.Module) -> bool:
    return all(t.device.type == "meta" for t in [*model.parameters(), *model.buffers()])


def _meta_clone(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every parameter and buffer on meta; the original is untouched."""
    import copy

    memo: dict[int, Any] = {}
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in memo:
            meta = torch.empty_like(t, device="meta")
            memo[id(t)] = (
                nn.Parameter(meta, t.requires_grad) if isinstance(t, nn.Parameter) else meta
            )
    return copy.deepcopy(model, memo)


def _batch_factory(batch: Any) -> Callable[[], Any]:
    if callable(batch) and not isinstance(batch, torch.Tensor):
        return batch  # type: ignore[no-any-return]
    return lambda: batch


def _batch_text(workload: Workload, batch_size: int | None, seq_len: int | None) -> str:
    """How the batch reads in a report; empty when only the trace can tell (see below)."""
    if batch_size is not None:
        return f"{batch_size} x {seq_len} tokens" if seq_len else f"batch of {batch_size}"
    return ""


def _batch_from_trace(trace: Trace) -> str:
    """The shape of the first input the step allocated (the user's batch factory is not called
    outside the trace: it may create CUDA tensors, and an estimate never touches a GPU)."""
    for info in trace.infos:
        if info.category is Category.INPUT and info.shape:
            return " x ".join(str(s) for s in info.shape)
    return "custom batch"


def estimate_workload(
    workload: Workload,
    *,
    name: str,
    allocator_config: str = "",
    gpu: GPU | None = None,
    batch_text: str = "",
    with_least_capacity: bool = False,
    capacity: int | None = None,
    tight_verdict: bool = False,
) -> Estimate:
    """Trace and replay one workload (the work behind :func:`estimate`). With
    ``with_least_capacity``, also the least memory it runs in (``estimator._pressure``) and,
    given a ``capacity`` it runs in, how often the allocator frees its cache there. With
    ``tight_verdict``, both are found when the free-running peak does not fit ``gpu``, so that
    the verdict can say whether the step fits by freeing the cache."""
    config = AllocatorConfig.parse(allocator_config)
    target = gpu or resolve_gpu(_DEFAULT_GPU)
    trace = trace_workload(workload, target)
    batch_text = batch_text or _batch_from_trace(trace)
    allocated, reserved, peak_index = _replay(trace, config)
    context = target.context_for(workload.mode)
    if (
        tight_verdict
        and gpu is not None
        and capacity is None
        and max(reserved, default=0) + context > gpu.total
    ):
        # it does not fit with memory to spare: say whether it fits by freeing the cache
        # (not worth the replays when even the allocated peak does not fit)
        capacity = gpu.total - context
        with_least_capacity = max(allocated, default=0) + context <= gpu.total
    least = retries = None
    if with_least_capacity and allocated:
        least = least_capacity(trace, config, max(allocated), max(reserved))
        if capacity is not None and capacity >= least:
            retries = retries_within(trace, config, capacity)
    by_category, by_module = _breakdown(trace, peak_index)
    info = _info_at(trace, peak_index)
    phases = [
        (p, max(0, i - trace.steps_start))
        for p, i in trace.phases
        if i >= trace.steps_start and p not in ("setup", "steps", "end")
    ]
    return Estimate(
        workload=_summary(workload, trace, name, batch_text, allocator_config),
        peak_allocated=max(allocated) if allocated else 0,
        peak_reserved=max(reserved) if reserved else 0,
        non_pytorch=context,
        by_category=by_category,
        by_module=by_module,
        peak_op=info[0],
        peak_module=info[1],
        peak_phase=info[2],
        timeline=Timeline(allocated, reserved, phases),
        gpu=gpu,
        notes=list(trace.notes),
        trace_seconds=trace.seconds,
        least_capacity=least,
        alloc_retries=retries,
    )


def _summary(
    workload: Workload, trace: Trace, name: str, batch_text: str, allocator_config: str
) -> WorkloadSummary:
    return WorkloadSummary(
        model=name,
        parameters=trace.parameters,
        batch=batch_text,
        mode=workload.mode,
        precision=workload.precision,
        optimizer=workload.optimizer if isinstance(workload.optimizer, str) else "custom",
        activation_checkpointing=workload.activation_checkpointing,
        allocator_config=allocator_config,
        steps=workload.steps,
        torch_version=torch.__version__,
    )


def _replay(trace: Trace, config: AllocatorConfig) -> tuple[list[int], list[int], int]:
    """Allocated and reserved after each event of the steps; index of the allocated peak."""
    alloc = CachingAllocator(config)
    allocated: list[int] = []
    reserved: list[int] = []
    peak, peak_index = -1, trace.steps_start
    for i in feed(trace, alloc):
        if i >= trace.steps_start:
            allocated.append(alloc.allocated)
            reserved.append(alloc.reserved)
            if alloc.allocated > peak:
                peak, peak_index = alloc.allocated, i
    if not allocated:
        allocated.append(alloc.allocated)
        reserved.append(alloc.reserved)
    return allocated, reserved, peak_index


def _live_at(trace: Trace, index: int) -> dict[int, tuple[int, int]]:
    live: dict[int, tuple[int, int]] = {}
    for event in trace.events[: index + 1]:
        if event.kind == "alloc" and event.info is not None:
            live[event.block] = (event.size, event.info)
        else:
            live.pop(event.block, None)
    return live


def _breakdown(trace: Trace, index: int) -> tuple[dict[Category, int], list[tuple[str, int]]]:
    by_category: dict[Category, int] = defaultdict(int)
    by_module: dict[str, int] = defaultdict(int)
    for size, info_index in _live_at(trace, index).values():
        info = trace.infos[info_index]
        by_category[info.category] += size
        by_module[module_group(info.module)] += size
    modules = sorted(by_module.items(), key=lambda kv: -kv[1])
    ordered = dict(sorted(by_category.items(), key=lambda kv: -kv[1]))
    return ordered, modules


def module_group(path: str) -> str:
    """Group a module path at its repeated block (``encoder.layer.3``) or its first two parts."""
    path = path.replace(" (backward)", "")
    if not path:
        return "(outside modules)"
    parts = path.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:2])


def _info_at(trace: Trace, index: int) -> tuple[str, str, str]:
    for event in reversed(trace.events[: index + 1]):
        if event.kind == "alloc" and event.info is not None:
            info = trace.infos[event.info]
            return info.op, info.module or "(outside modules)", info.phase
    return "", "", ""
