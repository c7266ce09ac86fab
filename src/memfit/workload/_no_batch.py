"""A model factory given without a batch: why memfit cannot make one, and what to write.

A factory (``file.py:make_model``) says how to build a model, not what its ``forward`` is
given: without ``make_batch`` beside it, memfit has no batch to run. Before saying so, the
factory runs once (on the meta device, free), so that what is wrong with it comes first: its
own exception (a :class:`~memfit.UserCodeError` with its type, message and line) or a value
that is not a module. The model it builds then shapes the example of ``make_batch``, and a
model of a kind memfit knows by name (transformers, torchvision, timm) gets the name to give.
"""

from __future__ import annotations

import traceback
from typing import TYPE_CHECKING

import torch
from torch import nn

from memfit._errors import InvalidInputError, UserCodeError
from memfit.workload._first_imports import imports_outside_modes

if TYPE_CHECKING:
    from memfit.workload._models import ModelRecipe

__all__ = ["no_batch_error"]

_NAMED_KINDS = (
    "memfit makes the batches itself for the models it knows by name: catalog names "
    "(memfit estimate --list-models), hf:org/name or hf:path/to/config.json, tv:NAME "
    "(torchvision) and timm:NAME"
)


def no_batch_error(recipe: ModelRecipe) -> InvalidInputError:
    """The error for ``recipe`` (a factory without ``make_batch``), once its factory ran:
    raises the factory's own error instead, where it has one."""
    model = _built(recipe)
    file, _, factory = recipe.name.rpartition(":")
    example = _example(model) if model is not None else None
    body, why = example or (
        "torch.randn(batch_size, 16)",
        "for a model whose first layer is nn.Linear(16, ...)",
    )
    kind = _named_kind(model) if model is not None else None
    return InvalidInputError(
        f"memfit cannot know what the model {factory}() in {file} takes as input: a factory "
        "says how to build the model, not what its forward is given. Define make_batch("
        f"batch_size, seq_len) beside {factory} in {file}, returning one batch of batch_size "
        "samples as forward takes it (a tensor, or a tuple or dict of tensors), e.g. 'def "
        f"make_batch(batch_size, seq_len): return {body}' ({why}); and loss_fn(model, batch) "
        f"if the output is not the loss. {kind or _NAMED_KINDS}."
    )


def _built(recipe: ModelRecipe) -> nn.Module | None:
    """The factory's model, built on the meta device; ``None`` where it cannot be built here
    for a reason that is not the user's (it needs CUDA, or an op has no meta kernel). What the
    factory raises, or a value that is not a module, is raised."""
    try:
        with torch.device("meta"), imports_outside_modes():
            return recipe.build()
    except UserCodeError as exc:
        if _needs_cuda(exc.__cause__):  # .cuda() in a factory: the trace would answer it
            return None
        raise
    except InvalidInputError:  # it returned something that is not a module: said as such
        raise
    except Exception:  # no meta kernel for an op of the build: the trace would say which
        return None


def _needs_cuda(exc: BaseException | None) -> bool:
    """Whether ``exc`` came from starting CUDA (``.cuda()`` on a machine without a GPU)."""
    if exc is None:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return any(
        frame.name == "_lazy_init" and "cuda" in frame.filename.replace("\\", "/")
        for frame in frames
    )


def _example(model: nn.Module) -> tuple[str, str] | None:
    """A ``make_batch`` body for ``model``'s first layer that takes inputs, and why."""
    for module in model.modules():
        shown = f"its first layer, {type(module).__name__}"
        if isinstance(module, nn.Linear):
            return (
                f"torch.randn(batch_size, {module.in_features})",
                f"{shown}, takes {module.in_features} features",
            )
        if isinstance(module, nn.Embedding):
            return (
                f"torch.randint(0, {module.num_embeddings}, (batch_size, seq_len))",
                f"{shown}, takes token ids below {module.num_embeddings}",
            )
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
            space = {1: "seq_len", 2: "224, 224", 3: "16, 112, 112"}[module.weight.dim() - 2]
            return (
                f"torch.randn(batch_size, {module.in_channels}, {space})",
                f"{shown}, takes {module.in_channels} channels",
            )
        if isinstance(module, nn.RNNBase):
            dims = "batch_size, seq_len" if module.batch_first else "seq_len, batch_size"
            return (
                f"torch.randn({dims}, {module.input_size})",
                f"{shown}, takes {module.input_size} features a step",
            )
    return None


def _named_kind(model: nn.Module) -> str | None:
    """How to give ``model`` by name, where it is of a kind memfit makes batches for."""
    library = type(model).__module__.split(".")[0]
    name = type(model).__name__
    if library == "transformers":
        return (
            f"Your factory returns a transformers {name}: give its config instead, "
            "hf:path/to/config.json (model.config.save_pretrained(FOLDER) writes it), and "
            "memfit makes its batches"
        )
    if library == "torchvision":
        return (
            f"Your factory returns a torchvision {name}: give it by name instead, e.g. "
            "tv:resnet50, and memfit makes its batches"
        )
    if library == "timm":
        return (
            f"Your factory returns a timm {name}: give it by name instead, timm:NAME, and "
            "memfit makes its batches"
        )
    return None
