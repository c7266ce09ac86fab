"""From what users give (a model name, module or factory; a batch or a factory of one; keyword
settings) to a :class:`~memfit.workload.Workload`, checked once."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from memfit._errors import InvalidInputError
from memfit._gpus import resolve_gpu
from memfit.allocator import AllocatorConfig
from memfit.technique import checked_techniques, technique_aliases, with_aliases
from memfit.technique.checkpointing import checkpoint_blocks
from memfit.technique.compilation import compiled_as_eager
from memfit.technique.offload import check_offload
from memfit.workload._limits import check_recipe_batch
from memfit.workload._models import TEXT_TASKS, ModelRecipe, resolve_model
from memfit.workload._no_batch import no_batch_error
from memfit.workload._spec import (
    Batch,
    Workload,
    WorkloadOptions,
    check_count,
    check_moe_routing,
    given_options,
)
from memfit.workload._step import default_loss
from memfit.workload._user import checked_factory, wrap_user

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["make_workload"]

ModelArg = nn.Module | Callable[[], nn.Module] | str | ModelRecipe


def make_workload(
    model: ModelArg,
    batch: Any = None,
    *,
    batch_of: Callable[[int], Batch] | None = None,
    **options: Unpack[WorkloadOptions],
) -> Workload:
    """The workload of ``model`` on ``batch``, with every setting parsed and checked.

    ``model`` is an ``nn.Module`` (real or meta weights; never modified), a zero-argument
    factory, a model name (``bert-base-uncased``, ``hf:...``, ``tv:resnet50``) or a recipe.
    ``batch`` is a tensor, tuple or dict, or a zero-argument factory of one; ``batch_of(n)``
    makes a batch of ``n`` samples instead (then ``batch_size`` picks ``n``). A model name
    makes its own batches: give ``batch_size`` (and ``seq_len`` for text models). A setting
    given as ``None`` is not given (:func:`given_options`), except the three whose default is a
    value (``precision``, ``mode``, ``activation_checkpointing``), where ``None`` is refused.
    """
    unknown = set(options) - set(WorkloadOptions.__annotations__) - set(technique_aliases())
    if unknown:
        raise InvalidInputError(
            f"Unknown setting(s) {', '.join(sorted(unknown))}; the settings are "
            f"{', '.join(WorkloadOptions.__annotations__)}."
        )
    options = given_options(cast(WorkloadOptions, with_aliases(dict(options))))
    if model is None:
        raise InvalidInputError(
            "model=None: give a model name (e.g. 'gpt2', 'hf:path/to/config.json', "
            "'tv:resnet50'), an nn.Module or a factory that returns one."
        )
    _check_mode_settings(options)
    _check_step_settings(options)
    # torch.compile'd parts are refused, or unwrapped with a note when compiled="eager"
    model, compiled_notes = compiled_as_eager(model, batch, options)
    # the cheap checks first: a bad size or setting fails before a model is looked up
    for count in ("batch_size", "seq_len", "steps", "accumulation"):
        if options.get(count) is not None:
            check_count(count, options.get(count))
    if options.get("moe_routing") is not None:
        check_moe_routing(options.get("moe_routing"))
    gpu = options.get("gpu")
    target = resolve_gpu(gpu) if gpu is not None else None
    text = options.get("allocator_config") or ""
    allocator = AllocatorConfig.parse(text)
    recipe = resolve_model(model) if isinstance(model, str) else model
    if isinstance(recipe, ModelRecipe):
        parts = _recipe_parts(recipe, batch, batch_of, options)
    else:
        parts = _module_parts(recipe, batch, batch_of, options)
    parts.setdefault("batch_of", batch_of)
    parts["notes"] = (*parts.get("notes", ()), *compiled_notes)
    mode = options.get("mode", "train")
    steps = options.get("steps")
    # a setting whose field has its own name is taken as given (Workload checks it)
    same: dict[str, Any] = {k: v for k, v in options.items() if k in _AS_GIVEN}
    if "offload" in same:  # True is every block, False none: the share as a number
        same["offload"] = check_offload(same["offload"])
    if "techniques" in same:  # a mapping as given: checked, those at their default left out
        same["techniques"] = checked_techniques(same["techniques"])
    return Workload(
        **same,
        steps=steps if steps is not None else (2 if mode == "train" else 1),
        allocator=allocator,
        allocator_text=text,
        gpu=target,
        **parts,
    )


# the settings turned into something else on the way in: their fields are set above
_DERIVED = frozenset({"loss_fn", "steps", "gpu", "allocator_config"})
_AS_GIVEN = (
    frozenset(f.name for f in dataclasses.fields(Workload))
    & frozenset(WorkloadOptions.__annotations__)
) - _DERIVED


def _check_mode_settings(options: WorkloadOptions) -> None:
    """Refuse training settings given for inference: they would be ignored."""
    if options.get("mode") != "infer":
        return
    if options.get("optimizer") is not None:
        raise InvalidInputError(
            f"optimizer={options['optimizer']!r} with mode='infer' would be ignored: inference "
            "keeps no optimizer state. Drop optimizer=, or use mode='train'."
        )
    if options.get("loss_fn") is not None:
        raise InvalidInputError(
            "loss_fn with mode='infer' would be ignored: inference runs the model on the batch "
            "(model(**batch), model(*batch) or model(batch)) under torch.no_grad(), without a "
            "loss. Drop loss_fn, or give a batch the model's forward takes, or step_fn="
            "lambda model, batch: ... to run the inference step your way."
        )
    if (options.get("accumulation") or 1) != 1:
        raise InvalidInputError(
            f"accumulation={options['accumulation']!r} with mode='infer' would be ignored: "
            "gradient accumulation adds up the gradients of several micro-batches before an "
            "optimizer step, and inference has neither. Drop accumulation, or use mode='train' "
            "(for a larger inference batch, raise batch_size)."
        )
    if options.get("activation_checkpointing"):
        raise InvalidInputError(
            "activation_checkpointing=True with mode='infer' would be ignored: checkpointing "
            "saves memory by recomputing activations in the backward pass, and inference has "
            "none. Drop it, or use mode='train'."
        )


def _check_step_settings(options: WorkloadOptions) -> None:
    """Refuse settings a step function makes meaningless: they would be ignored."""
    if options.get("step_fn") is None:
        return
    if options.get("loss_fn") is not None:
        raise InvalidInputError(
            "loss_fn and step_fn given together: the step function computes its own loss, so "
            "loss_fn would be ignored. Drop loss_fn (or drop step_fn and let memfit run "
            "forward, loss_fn, backward and the optimizer)."
        )
    if (options.get("accumulation") or 1) != 1:
        raise InvalidInputError(
            f"accumulation={options['accumulation']!r} and step_fn given together: the step "
            "function is one whole optimizer step as written, so memfit's accumulation would "
            "be ignored. Loop over the micro-batches inside your step (backward on each, then "
            "optimizer.step()), or drop step_fn and let memfit accumulate."
        )
    _refuse_mixed_with_step(options.get("precision"))


def _refuse_mixed_with_step(precision: object) -> None:
    if isinstance(precision, str) and precision.endswith("-mixed"):
        dtype = "torch.bfloat16" if precision.startswith("bf16") else "torch.float16"
        raise InvalidInputError(
            f"precision={precision!r} with step_fn: mixed precision is decided inside your "
            f"step, so memfit would not know where to apply it. Write it there (with "
            f"torch.autocast('cuda', dtype={dtype}):  ..., and torch.amp.GradScaler('cuda') "
            "for fp16; memfit traces them as the GPU runs them) and drop precision=, or give "
            "'fp32', 'bf16' or 'fp16' (the parameters' dtype)."
        )


def _recipe_parts(
    recipe: ModelRecipe,
    batch: Any,
    batch_of: Callable[[int], Batch] | None,
    options: WorkloadOptions,
) -> dict[str, Any]:
    """The model's own build, loss and checkpointing; its own batches unless one is given."""
    loss_fn = options.get("loss_fn") or recipe.loss_fn or default_loss
    parts: dict[str, Any] = {
        "name": recipe.name,
        "build_model": recipe.build,
        "loss_fn": loss_fn,
        "enable_checkpointing": recipe.enable_checkpointing,
        **_recipe_step(recipe, options),
    }
    if batch is not None or batch_of is not None:
        return {**parts, "make_batch": _batch_maker(batch, batch_of, options)}
    batch_size = options.get("batch_size")
    if batch_size is None:
        raise InvalidInputError(
            f"Give a batch for {recipe.name!r}: batch_size= (and seq_len= for text models), "
            "or batch= with example tensors."
        )
    seq_len = options.get("seq_len")
    make = recipe.make_batch
    if make is None:  # a factory alone: its own errors first, then what make_batch to write
        raise no_batch_error(recipe)
    length = seq_len if seq_len is not None else recipe.default_seq_len
    notes = check_recipe_batch(recipe, batch_size, seq_len, length)
    own_step = recipe.forward_fn or recipe.step_fn or options.get("step_fn")
    if options.get("mode") == "infer" and own_step is None and recipe.task in TEXT_TASKS:
        notes = (*notes, _LOSS_IN_INFERENCE)
    return {
        **parts,
        "notes": notes,
        "make_batch": lambda: make(batch_size, length),
        "batch_of": lambda n: make(n, length),
        "forward_fn": recipe.forward_fn,
    }


def _recipe_step(recipe: ModelRecipe, options: WorkloadOptions) -> dict[str, Any]:
    """The recipe's own step function and optimizer factory (a file's ``step`` and
    ``make_optimizer``), unless the caller gives theirs: both given is refused."""
    parts: dict[str, Any] = {}
    for own, option in ((recipe.step_fn, "step_fn"), (recipe.optimizer, "optimizer")):
        if own is None:
            continue
        if options.get(option) is not None:
            raise InvalidInputError(
                f"{recipe.name} defines its own {'step' if option == 'step_fn' else option} "
                f"and {option}= was given too: one of them would be ignored. Drop {option}=, "
                "or remove it from the file."
            )
        parts[option] = own
    if recipe.step_fn is not None:
        if options.get("loss_fn") is not None:
            raise InvalidInputError(
                f"{recipe.name} defines a step function, so loss_fn= would be ignored: drop it."
            )
        _refuse_mixed_with_step(options.get("precision"))
    return parts


_LOSS_IN_INFERENCE = (
    "inference calls model(**batch) on a batch with labels, so the model also computes its "
    "loss over the logits (float32 log-softmax and all); a serving step without labels takes "
    "less: estimate it with your own batch (batch= without 'labels')"
)


def _module_parts(
    model: nn.Module | Callable[[], nn.Module],
    batch: Any,
    batch_of: Callable[[int], Batch] | None,
    options: WorkloadOptions,
) -> dict[str, Any]:
    """A user's module or factory: their batch, their loss or the output's ``.loss``."""
    if batch is None and batch_of is None:
        raise InvalidInputError("Give batch= (a tensor, tuple, dict, or a factory of one).")
    name = (
        type(getattr(model, "_orig_mod", model)).__name__  # torch.compile(Net) is named Net
        if isinstance(model, nn.Module)
        else getattr(model, "__name__", "model")
    )
    return {
        "name": name,
        "build_model": _model_factory(model, name),
        "make_batch": _batch_maker(batch, batch_of, options),
        "loss_fn": options.get("loss_fn") or default_loss,
        "enable_checkpointing": _generic_checkpointing,
    }


def _batch_maker(
    batch: Any, batch_of: Callable[[int], Batch] | None, options: WorkloadOptions
) -> Callable[[], Batch]:
    if batch is not None and batch_of is not None:
        raise InvalidInputError("Give batch= or batch_of=, not both.")
    if batch_of is not None:
        if not callable(batch_of):
            raise InvalidInputError(
                f"batch_of={batch_of!r} is not callable: give a function of the batch size "
                "that returns a batch (batch_of=lambda n: torch.randn(n, 64))."
            )
        batch_of = wrap_user(batch_of, f"batch_of={_name(batch_of)}")
        batch_size = options.get("batch_size")
        if batch_size is None:
            # the batch-size search sets it (Workload.with_batch_size) before a batch is made
            def unsized() -> Batch:
                raise InvalidInputError("batch_of= needs batch_size= to make a batch.")

            return unsized
        return lambda: batch_of(batch_size)
    if callable(batch) and not isinstance(batch, torch.Tensor):
        return wrap_user(batch, f"the batch factory {_name(batch)}()")
    return lambda: batch


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or fn)


def _generic_checkpointing(model: nn.Module) -> None:
    """The model's own checkpointing switch (transformers, timm), else memfit's full
    checkpointing of its repeated blocks."""
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if callable(enable):
        enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return
    setter = getattr(model, "set_grad_checkpointing", None)
    if callable(setter):
        setter(True)
        return
    checkpoint_blocks(model, selective=False)  # no switch of its own: its repeated blocks


def _model_factory(model: Any, name: str) -> Callable[[], nn.Module]:
    if isinstance(model, nn.Module):
        template = model

        def rebuild() -> nn.Module:
            # same architecture, same parameter order, weights never copied
            return copy.deepcopy(template) if _all_meta(template) else _meta_clone(template)

        return rebuild
    if callable(model):
        return checked_factory(model, f"the model factory {_name(model)}()")
    raise InvalidInputError(f"model={model!r} is not an nn.Module, a factory, or a model name.")


def _all_meta(model: nn.Module) -> bool:
    return all(t.device.type == "meta" for t in [*model.parameters(), *model.buffers()])


def _meta_clone(model: nn.Module) -> nn.Module:
    """A copy of ``model`` with every parameter and buffer on meta; the original is untouched."""
    memo: dict[int, Any] = {}
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in memo:
            meta = torch.empty_like(t, device="meta")
            memo[id(t)] = (
                nn.Parameter(meta, t.requires_grad) if isinstance(t, nn.Parameter) else meta
            )
    return copy.deepcopy(model, memo)
