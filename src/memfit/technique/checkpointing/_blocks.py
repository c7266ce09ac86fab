"""Selective activation checkpointing of a model's repeated blocks, as torchtitan applies it.

``activation_checkpointing="selective"`` wraps each block in ``torch.utils.checkpoint`` with a
policy (``create_selective_checkpoint_contexts``): what the matrix products and attention kernels
return is kept for the backward, everything else (norms, activations, dropout, residual sums)
is recomputed there. It keeps most of full checkpointing's saving of element-wise tensors and
recomputes only cheap ops, so it is the middle ground between no checkpointing and full
(``activation_checkpointing=True``, the model's own switch).

The blocks: for a Hugging Face model, the most numerous class it names in
``_no_split_modules`` (its decoder or encoder layers, as FSDP wraps them; its KV cache is
switched off, as transformers' own checkpointing does); otherwise the module class with the most
instances that contain modules of their own, the outermost on a tie (timm's ViT ``Block`` over
its ``Attention``, torchvision's ``Bottleneck``). Blocks inside a block are not wrapped again.
The wrapping is a ``forward`` on each block instance: :func:`unwrap_blocks` takes it off.

``activation_checkpointing=0.5`` (a fraction between 0 and 1) is partial checkpointing: that
share of the blocks, spread evenly, checkpointed in full and the others not at all, memfit's
wrapping for every model. The planner uses it to spend exactly the memory a budget leaves.
"""

from __future__ import annotations

import functools
import weakref
from collections import Counter
from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError

__all__ = [
    "SAVED_OPS",
    "blocks_for",
    "call_forward",
    "checkpoint_blocks",
    "checkpointed_blocks",
    "checkpointing_on",
    "chosen_blocks",
    "find_blocks",
    "unwrap_blocks",
    "unwrap_forward",
    "wrap_forward",
]

aten = torch.ops.aten
# what the selective policy keeps: the outputs of the expensive ops (recomputing them would
# cost the backward most of the forward's time again)
SAVED_OPS = frozenset(
    {
        aten.mm.default,
        aten.addmm.default,
        aten.bmm.default,
        aten.baddbmm.default,
        aten.convolution.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_cudnn_attention.default,
    }
)
_MARK = "_memfit_checkpointed"


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks, outermost instances only, in module order."""
    named = list(model.named_modules())
    wanted = set(getattr(model, "_no_split_modules", None) or ())
    named_blocks = Counter(type(m) for _, m in named if type(m).__name__ in wanted)
    if named_blocks:  # the layers, not the embeddings some models name too (BERT)
        chosen = {max(named_blocks, key=lambda c: named_blocks[c])}
    else:
        chosen = _most_repeated(named)
    blocks: list[nn.Module] = []
    inside: set[int] = set()
    for _, module in named:
        if id(module) in inside or type(module) not in chosen:
            continue
        blocks.append(module)
        inside.update(id(m) for m in module.modules())
    if not blocks:
        raise InvalidInputError(
            f"Activation checkpointing found no repeated blocks in "
            f"{type(model).__name__} (no module class with two or more instances that hold "
            "modules of their own). Wrap your blocks in torch.utils.checkpoint.checkpoint "
            "yourself and estimate without it."
        )
    return blocks


def _most_repeated(named: list[tuple[str, nn.Module]]) -> set[type]:
    """The container class with the most instances (at least two); the shallowest on a tie."""
    containers = [
        (name, m)
        for name, m in named
        if name
        and any(True for _ in m.children())
        and not isinstance(m, (nn.ModuleList, nn.Sequential))
    ]
    counts = Counter(type(m) for _, m in containers)
    depth: dict[type, int] = {}
    for name, m in containers:
        depth.setdefault(type(m), name.count("."))
    best = max(counts, key=lambda c: (counts[c], -depth[c]), default=None)
    return {best} if best is not None and counts[best] >= 2 else set()


def checkpoint_blocks(
    model: nn.Module, *, selective: bool = True, fraction: float = 1.0
) -> list[nn.Module]:
    """Wrap each block of ``model`` in selective checkpointing (``selective=False``: full
    checkpointing, every output recomputed, for models without a switch of their own, such as
    torchvision's); returns the blocks wrapped. ``fraction`` < 1 wraps only that share of the
    blocks (:func:`chosen_blocks`), the rest keep everything: the memory saved and the recompute
    paid grow block by block between none and all."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts, noop_context_fn

    if checkpointing_on(model):
        raise InvalidInputError(
            f"{type(model).__name__} already has gradient checkpointing switched on "
            "(gradient_checkpointing_enable()); memfit's checkpointing would checkpoint its "
            "blocks twice. Switch it off (gradient_checkpointing_disable()) or estimate with "
            "activation_checkpointing=True."
        )
    context: Any = (
        functools.partial(create_selective_checkpoint_contexts, _policy)
        if selective
        else noop_context_fn
    )
    blocks = chosen_blocks(find_blocks(model), fraction)
    for module in model.modules():  # as transformers' own checkpointing does: a KV cache
        config: Any = getattr(module, "config", None)  # filled in the forward would change
        if getattr(config, "use_cache", False):  # the recompute (T5's decoder has its own)
            config.use_cache = False
    for block in blocks:
        if _MARK not in block.__dict__:
            wrap_forward(block, _MARK, lambda f: functools.partial(_checkpointed, f, context))
    return blocks


def wrap_forward(block: nn.Module, mark: str, wrapper: Any) -> None:
    """Set ``block.forward`` to ``wrapper(forward)``, noting under ``mark`` what
    :func:`unwrap_forward` puts back. Another wrapper's forward is wrapped in turn and kept;
    the class's is held weakly (:func:`call_forward`): a wrapper holding its block would be a
    cycle, and the block's parameters (on the GPU) would outlive the model until gc runs."""
    own = block.__dict__.get("forward")
    forward = own if own is not None else weakref.WeakMethod(block.forward)
    block.forward = wrapper(forward)
    block.__dict__[mark] = own if own is not None else True


def unwrap_forward(module: nn.Module, mark: str) -> None:
    """Take :func:`wrap_forward`'s wrapping under ``mark`` off ``module``, if it has one."""
    previous = module.__dict__.pop(mark, None)
    if previous is not None:
        del module.forward
        if previous is not True:
            module.forward = previous


def call_forward(forward: Any) -> Any:
    """The forward :func:`wrap_forward` wrapped, to call (the block is calling: it is alive)."""
    return forward() if isinstance(forward, weakref.WeakMethod) else forward


def chosen_blocks(blocks: list[nn.Module], fraction: float) -> list[nn.Module]:
    """The ``round(fraction * len(blocks))`` blocks a partial checkpointing wraps, spread evenly
    over the model (every other block at one half), as torchtitan's every-n-th-layer option does:
    what a block saves is held from its forward to its backward wherever it sits, so the peak
    depends on how many blocks are wrapped, not which."""
    n = len(blocks)
    k = blocks_for(fraction, n)
    return [b for i, b in enumerate(blocks) if (i + 1) * k // n > i * k // n]


def blocks_for(fraction: float, blocks: int) -> int:
    """How many of ``blocks`` blocks a checkpointing of ``fraction`` of them wraps."""
    return min(blocks, max(0, round(fraction * blocks)))


def checkpointing_on(model: nn.Module) -> bool:
    """Whether the model's own checkpointing switch is on (transformers' new name first: the
    old one warns in transformers 5)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def unwrap_blocks(model: nn.Module) -> None:
    """Take :func:`checkpoint_blocks`' wrapping off again (a forward another wrapper had set
    on the block is put back)."""
    for module in model.modules():
        unwrap_forward(module, _MARK)


def _checkpointed(forward: Any, context: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import checkpoint

    return checkpoint(
        call_forward(forward), *args, use_reentrant=False, context_fn=context, **kwargs
    )


def _policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def checkpointed_blocks(model: nn.Module) -> list[nn.Module]:
    """The modules of ``model`` that :func:`checkpoint_blocks` wrapped."""
    return [m for m in model.modules() if _MARK in m.__dict__]
