"""Checks of a model's own batch before any work: the sequence length it takes, and what making
the batch would cost the host.

A trace runs on meta tensors and costs the host almost nothing, but the batch a recipe makes is
made on the CPU first (token ids, attention mask, labels: 24 bytes a token), so an absurd batch
(``gpt2 -b 1000000 -s 1024``: 24 GB) would be killed by the host's out-of-memory killer after a
minute, with no message. The bounds are chosen never to refuse a workload a GPU could run:

- the batch's host memory must stay under half the host's physical memory;
- a language model's logits alone (batch x sequence x vocabulary, fp32) must fit the largest GPU
  memfit accepts (``MAX_GPU_SIZE``, 2 TiB): beyond it no GPU runs the step.
"""

from __future__ import annotations

import os

from memfit._errors import InvalidInputError
from memfit._gpus import MAX_GPU_SIZE
from memfit._units import format_bytes
from memfit.workload._models import TEXT_TASKS, ModelRecipe

__all__ = ["check_recipe_batch", "host_memory"]

_TEXT_BYTES_PER_TOKEN = 3 * 8  # input_ids, attention_mask and labels, int64, made on the CPU


def host_memory() -> int | None:
    """The host's physical memory in bytes, where the OS says (``None``: unknown)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def check_recipe_batch(
    recipe: ModelRecipe, batch_size: int, seq_len: int | None, length: int | None
) -> tuple[str, ...]:
    """Refuse a batch the model cannot take or the host cannot make; notes for the estimate.

    ``seq_len`` is what the user gave, ``length`` what the batch will have (the model's default
    where none was given)."""
    if recipe.image_size and seq_len is not None:
        raise InvalidInputError(
            f"{recipe.name} takes images ({recipe.image_size} x {recipe.image_size}); "
            f"seq_len={seq_len} (--seq-len) does not apply to it: leave it out."
        )
    if recipe.task in TEXT_TASKS and length is None:
        raise InvalidInputError(
            f"{recipe.name} is a text model and needs a sequence length: give seq_len= "
            "(-s/--seq-len on the command line), e.g. 512."
        )
    notes = _check_positions(recipe, length)
    _check_host_cost(recipe, batch_size, length)
    return notes


def _check_positions(recipe: ModelRecipe, length: int | None) -> tuple[str, ...]:
    limit = recipe.max_positions
    if length is None or limit is None or length <= limit:
        return ()
    if recipe.positions_hard:
        raise InvalidInputError(
            f"Sequence length {length} is longer than {recipe.name}'s position table "
            f"({limit} positions): the model cannot take it. Give seq_len <= {limit} "
            "(-s/--seq-len)."
        )
    return (
        f"sequence length {length} is longer than the {limit} positions {recipe.name} was "
        "configured for (rotary/relative positions: it runs, but was not trained that long)",
    )


def _check_host_cost(recipe: ModelRecipe, batch_size: int, length: int | None) -> None:
    if recipe.task not in TEXT_TASKS or length is None:
        return  # images are one repeated image: a large batch costs the host nothing
    tokens = batch_size * length
    if recipe.vocab_size:
        logits = tokens * recipe.vocab_size * 4
        if logits > MAX_GPU_SIZE:
            raise InvalidInputError(
                f"Batch {batch_size} x {length} tokens is beyond any GPU: {recipe.name}'s "
                f"logits alone ({tokens:,} tokens x {recipe.vocab_size:,} vocabulary, fp32) "
                f"take {format_bytes(logits)}, more than {format_bytes(MAX_GPU_SIZE)}. Give a "
                "smaller batch_size (-b) or seq_len (-s)."
            )
    host = host_memory()
    need = tokens * _TEXT_BYTES_PER_TOKEN
    if host is not None and need > host // 2:
        raise InvalidInputError(
            f"Batch {batch_size} x {length} tokens would take {format_bytes(need)} of this "
            f"host's {format_bytes(host)} just to make on the CPU before tracing. Give a "
            "smaller batch_size (-b) or seq_len (-s)."
        )
