"""Generation (``model.generate``, or a user's own decoding loop) traced as real data runs it.

A decoding loop picks each next token from the logits (``argmax`` when greedy, ``multinomial``
when sampling, ``topk`` in beam search), appends it, and asks its stopping criteria whether every
sequence has finished (``unfinished_sequences.max() == 0``, read on the host each step). The
logits come from the weights, which a trace does not have, so the chosen ids would have no value
and that check would be guessed: every sequence "finished" after one forward.

Here the chosen indices are given values (a shadow, see :mod:`memfit.trace._shadow`), the way
real data would give them: valid ids in the middle of the candidates, never one of the model's
special tokens (end-of-sequence, padding, beginning-of-sequence, decoder start). Everything
after follows from values: the end-of-sequence criterion finds no end token, the length
criterion stops at ``max_new_tokens`` (or ``max_length``), so every sequence runs to the limit,
the largest memory (the KV cache at its longest). Nothing in transformers is changed. Outside
``generate`` (a user's own decoding loop) only ``argmax``, ``argmin`` and ``multinomial`` are
answered, each with a note; a ``max`` or ``topk`` over activations keeps its indices unknown.

:func:`generation_observed` watches ``GenerationMixin.generate`` during a trace (it only reads
its arguments and its result) to learn the special ids before the first choice and to say, in
one sentence, what was assumed: how many new tokens ran and why. On a CUDA device transformers
compiles the decoding forward of a generation with a static cache (``_valid_auto_compile_criteria``,
``CompileConfig(mode="reduce-overhead")``: CUDA graphs); the trace runs it uncompiled, and the
note says so.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from memfit._errors import UnsupportedWorkloadError

__all__ = ["TOKEN_CHOICES", "Generation", "generation_observed", "special_token_ids"]

aten = torch.ops.aten
# op -> (position of the indices among the outputs, the candidates' dim argument index)
_CHOICES: dict[Any, tuple[int, int]] = {
    aten.argmax.default: (0, 1),
    aten.argmin.default: (0, 1),
    aten.multinomial.default: (0, -1),
    aten.topk.default: (1, 2),
    aten.max.dim: (1, 1),
    aten.min.dim: (1, 1),
}
TOKEN_CHOICES = frozenset(_CHOICES)
# outside generate, only what picks tokens (a user's own decoding loop) is answered: a max or a
# top-k over activations keeps its indices unknown, as before
_OUTSIDE = {aten.argmax.default, aten.argmin.default, aten.multinomial.default}
_SPECIAL_NAMES = ("eos_token_id", "pad_token_id", "bos_token_id", "decoder_start_token_id")


def _ids(value: Any) -> set[int]:
    """Token ids in a config value: an int, a list of them, or a tensor."""
    if isinstance(value, bool) or value is None:
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, torch.Tensor):
        return set() if value.device.type == "meta" else {int(x) for x in value.flatten().tolist()}
    if isinstance(value, (list, tuple, set)):
        return {i for x in value for i in _ids(x)}
    return set()


def special_token_ids(*sources: Any) -> set[int]:
    """The special ids named by generation configs, model configs and generate's keywords."""
    out: set[int] = set()
    for source in sources:
        for name in _SPECIAL_NAMES:
            value = source.get(name) if isinstance(source, dict) else getattr(source, name, None)
            out |= _ids(value)
    return out


def _dim_of(args: tuple[Any, ...], kwargs: dict[str, Any], position: int) -> int | None:
    if position < 0:
        return -1
    if len(args) > position:
        return args[position]  # type: ignore[no-any-return]
    return kwargs.get("dim", -1 if position == 2 else None)


@dataclass
class Generation:
    """Token choices answered during a trace, and what ``generate`` calls assumed."""

    notes: list[str] = field(default_factory=list)  # the trace's notes (shared with guesses)
    avoid: set[int] = field(default_factory=set)  # special ids a chosen token never is
    inside: int = 0  # > 0 while generate runs: its own note explains the choices

    def choose(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], outs: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """For an index-choosing op whose candidates have no value: (the meta indices, their
        value on the host), ordinary ids in the middle of the candidates; else None."""
        where = _CHOICES.get(func)
        if where is None or len(outs) <= where[0] or not (self.inside or func in _OUTSIDE):
            return None
        src, indices = args[0], outs[where[0]]
        if not isinstance(src, torch.Tensor) or indices.dtype != torch.long:
            return None
        dim = _dim_of(args, kwargs, where[1])
        n = src.numel() if dim is None else (int(src.shape[dim]) if src.dim() else 1)
        width = (
            int(indices.shape[-1]) if func in (aten.topk.default, aten.multinomial.default) else 1
        )
        if n < 1 or width > n:
            return None
        base = self._ordinary(n, width)
        value = torch.full(tuple(indices.shape), base, dtype=torch.long)
        if width > 1:  # k distinct ids, along the last dimension
            value += torch.arange(width)
        if not self.inside:
            name = func.overloadpacket.__name__
            self.notes.append(
                f"{name} over {n} values has no known value; answered index {base}, an ordinary"
                " one (no special token such as end-of-sequence)"
            )
        return indices, value

    def _ordinary(self, n: int, width: int) -> int:
        """The first id from the middle of ``n`` candidates whose ``width`` ids are not special."""
        start = max(0, min(n // 2, n - width))
        for offset in range(n):
            base = (start + offset) % (n - width + 1)
            if not any(base + i in self.avoid for i in range(width)):
                return base
        return start


@dataclass
class _Call:
    """What one generate call was asked for."""

    prompt: int
    limit: int | None
    how: str
    compiles: bool  # on a CUDA GPU: a static cache, and compilation not disabled


def _config_value(name: str, kwargs: dict[str, Any], *configs: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    for config in configs:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return None


def _describe_call(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
    inputs = args[0] if args else kwargs.get("input_ids", kwargs.get("inputs"))
    prompt = int(inputs.shape[-1]) if isinstance(inputs, torch.Tensor) else 0
    configs = (kwargs.get("generation_config"), getattr(model, "generation_config", None))
    limit = _config_value("max_new_tokens", kwargs, *configs)
    if limit is None:
        max_length = _config_value("max_length", kwargs, *configs)
        limit = None if max_length is None else int(max_length) - prompt
    beams = int(_config_value("num_beams", kwargs, *configs) or 1)
    sample = bool(_config_value("do_sample", kwargs, *configs))
    how = "sampling" if sample else "greedy"
    if beams > 1:
        how = f"beam search, {beams} beams" + (", sampling" if sample else "")
    cache = _config_value("cache_implementation", kwargs, *configs)
    given = kwargs.get("past_key_values", kwargs.get("cache"))
    static = cache == "static" or type(given).__name__ == "StaticCache"
    compiles = static and not _config_value("disable_compile", kwargs, *configs)
    return _Call(prompt, None if limit is None else int(limit), how, compiles)


def _new_tokens(model: Any, call: _Call, out: Any) -> int | None:
    sequences = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
    if not isinstance(sequences, torch.Tensor) or sequences.dim() == 0:
        return None
    config = getattr(model, "config", None)
    start = 1 if getattr(config, "is_encoder_decoder", False) else call.prompt
    return int(sequences.shape[-1]) - start


def _note(call: _Call, new: int | None) -> list[str]:
    """The sentences that say what a generate call assumed; a generation that stopped early
    on values the trace lacks is refused (its memory would be a lower bound)."""
    if new is None:
        return [f"generate ran ({call.how}): token choices were answered with ordinary ids"]
    if call.limit is not None and new < call.limit:
        # only a check on values the trace does not have stops generation before its limit
        # (chosen tokens are never end-of-sequence): what ran is a lower bound, not an estimate
        raise UnsupportedWorkloadError(
            f"model.generate stopped after {new} of {call.limit} new tokens ({call.how}): "
            "whether to stop was decided from values memfit does not have (beam scores, or a "
            "stopping criterion that reads the scores), so it cannot bound the memory of the "
            f"whole generation, and the memory of {new} tokens would be an estimate that is "
            "too low. Estimate greedy or sampling generation (num_beams=1) with the same "
            "max_new_tokens and no custom stopping_criteria; beam search is not supported yet."
        )
    else:
        first = (
            f"generate ran {new} new tokens for every sequence ({call.how}): each chosen token"
            " was answered with an ordinary id, so stopping at an end-of-sequence token was"
            " assumed never to happen (the upper bound)"
        )
    notes = [first]
    if call.compiles:
        notes.append(
            "generate with a static cache compiles its decoding step on a CUDA GPU"
            " (transformers' auto-compile, CUDA graphs); memfit traced it uncompiled, so the real"
            " memory may differ: pass disable_compile=True to generate() to run what was estimated"
        )
    return notes


def _generation_mixin() -> Any:
    module = sys.modules.get("transformers.generation.utils")
    return None if module is None else getattr(module, "GenerationMixin", None)


@contextmanager
def generation_observed(generation: Generation) -> Iterator[None]:
    """While active, ``GenerationMixin.generate`` tells ``generation`` its special ids and, on
    return, what it assumed. Only models already imported are watched: a trace builds the
    model first, so a transformers model's module has loaded transformers' generation code."""
    mixin = _generation_mixin()
    original = None if mixin is None else mixin.__dict__.get("generate")
    if original is None:
        yield
        return

    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        saved = set(generation.avoid)
        config = getattr(self, "config", None)
        generation.avoid |= special_token_ids(
            kwargs,
            kwargs.get("generation_config"),
            getattr(self, "generation_config", None),
            config,
            getattr(config, "get_text_config", lambda: None)() if config is not None else None,
        )
        call = _describe_call(self, args, kwargs)
        generation.inside += 1
        try:
            out = original(self, *args, **kwargs)
        finally:
            generation.inside -= 1
            generation.avoid = saved
        generation.notes += _note(call, _new_tokens(self, call, out))
        return out

    generate.__wrapped__ = original  # type: ignore[attr-defined]
    mixin.generate = generate
    try:
        yield
    finally:
        mixin.generate = original
