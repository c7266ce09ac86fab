"""How many sequences fit when serving: transformers' ``generate`` traced at each concurrency.

One request is a prompt of ``context - new_tokens`` tokens answered with ``new_tokens`` more,
greedy, every sequence running to the end (``min_new_tokens``), so that every sequence's cache
reaches ``context`` tokens. A concurrency is a batch of that many such requests, and its memory
is the estimate of that ``generate`` call as transformers runs it:
- the weights;
- the prefill's activations;
- the KV cache as its class grows it (a dynamic cache concatenates a token at a time, and a
  sliding-window layer keeps its window);
- the decode steps;
- the caching allocator's blocks for all of the above.

The largest concurrency that fits is found by doubling and then halving the gap, each step one
trace. The longest context at a concurrency is found the same way. A sequence's KV cache is
also worked out from the model's config (``kv_cache_bytes``), to show where the memory goes.

Not modelled, and said in the notes:
- other engines' paged caches (vLLM, TGI);
- continuous batching of requests of different lengths;
- speculative decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from memfit._errors import InvalidInputError
from memfit._events import Category
from memfit._gpus import GPU, resolve_gpu
from memfit.estimator._estimate import estimate_workload
from memfit.estimator._result import Estimate
from memfit.estimator._versions import installed_versions
from memfit.workload import make_workload

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "CACHES",
    "ServingCapacity",
    "ServingOptions",
    "ServingPoint",
    "kv_cache_bytes",
    "serving_capacity",
]

# notes of the estimate about memfit's own step and build, which say nothing of a server
_NOT_SERVING = ("your step function", "building the model leaves")
CACHES = ("dynamic", "static")  # transformers' cache classes a generate call is traced with
MAX_CONCURRENCY = 4096  # the search stops here
Progress = Callable[[int, str], None]

_NOT_MODELLED = (
    "serving as transformers' generate runs it: a batch of equal requests, each a prompt of "
    "{prompt} tokens and {new} greedy new tokens (every sequence to the end); other engines' "
    "paged KV caches (vLLM, TGI), continuous batching of requests of other lengths and "
    "speculative decoding are not modelled"
)


class ServingOptions(TypedDict, total=False):
    """:func:`serving_capacity`'s keywords besides the model, GPU and question."""

    new_tokens: int  # each request generates these, within the context (256)
    cache: str  # transformers' cache class: "dynamic" (generate's default) or "static"
    precision: str  # the weights' and activations' precision ("bf16")
    # the linear layers' weights quantized by bitsandbytes as a server loads them: "nf4" or
    # "fp4" (load_in_4bit), "int8" (load_in_8bit); None: in the precision
    quantize: str | None
    # contexts to give the largest concurrency at too; "around": powers of two around the
    # answer's context, from a quarter of it to four times it, within the model's positions
    table: tuple[int, ...] | str
    progress: Progress | None  # told of each trace: progress(traces, what)


@dataclass(frozen=True)
class ServingPoint:
    """One concurrency at one context: its estimate's peaks and whether it fits."""

    context: int
    concurrency: int
    peak_allocated: int
    peak_reserved: int
    needed: int  # peak reserved + the memory outside PyTorch's allocator
    fits: bool
    refused: str = ""  # why memfit would not build this batch (beyond any GPU): not traced

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "concurrency": self.concurrency,
            "peak_allocated": self.peak_allocated,
            "peak_reserved": self.peak_reserved,
            "needed": self.needed,
            "fits": self.fits,
            **({"refused": self.refused} if self.refused else {}),
        }


@dataclass(frozen=True)
class ServingCapacity:
    """The answer of :func:`serving_capacity`: the largest concurrency at ``context`` (or the
    longest context at ``concurrency``), with the points traced on the way."""

    model: str
    gpu: GPU
    precision: str
    cache: str
    new_tokens: int
    context: int  # the context asked about, or the longest found at ``concurrency``
    concurrency: int  # the largest found at ``context``, or the concurrency asked about
    best: ServingPoint | None  # the point that fits at the answer (None: not even one)
    weights: int  # parameter and buffer bytes on the GPU
    kv_cache_per_sequence: int  # a sequence's KV cache at ``context``, from the config
    # GPU memory outside PyTorch's allocator (the CUDA context), counted in each point's needed
    outside_pytorch: int = 0
    # a sequence's KV cache from the config at the answer's and the table's contexts
    kv_cache_by_context: dict[int, int] = field(default_factory=dict)
    points: list[ServingPoint] = field(default_factory=list)
    table: list[ServingPoint] = field(default_factory=list)  # the largest fit per context
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    quantize: str | None = None  # the linear layers' weights by bitsandbytes (None: none)

    @property
    def weights_words(self) -> str:
        """The precision, and the quantized weights' type where there is one."""
        return self.precision + (f" with {self.quantize} weights" if self.quantize else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "gpu": {"name": self.gpu.name, "memory": self.gpu.total},
            "precision": self.precision,
            "quantize": self.quantize,
            "cache": self.cache,
            "new_tokens": self.new_tokens,
            "context": self.context,
            "concurrency": self.concurrency,
            "best": None if self.best is None else self.best.to_dict(),
            "weights": self.weights,
            "kv_cache_per_sequence": self.kv_cache_per_sequence,
            "outside_pytorch": self.outside_pytorch,
            "kv_cache_by_context": {str(c): b for c, b in sorted(self.kv_cache_by_context.items())},
            "points": [p.to_dict() for p in self.points],
            "table": [p.to_dict() for p in self.table],
            "notes": list(self.notes),
            "versions": dict(self.versions),
            "units": "bytes",
        }


def serving_capacity(
    model: str,
    *,
    gpu: str | GPU,
    context: int | None = None,
    concurrency: int | None = None,
    **options: Unpack[ServingOptions],
) -> ServingCapacity:
    """The largest number of sequences of ``context`` tokens (prompt and ``new_tokens``) that
    ``model`` generates at once within ``gpu``'s memory, or, given ``concurrency`` instead, the
    longest context they fit at; ``table`` adds the largest concurrency at each of those
    contexts (``"around"``: powers of two around the answer's). ``cache`` is transformers' cache
    class (``dynamic``, the default of generate, or
    ``static``). Each point is one trace of ``generate`` on the CPU; ``progress(traces, what)``
    is told of each."""
    target = resolve_gpu(gpu)
    unknown = set(options) - set(ServingOptions.__annotations__)
    if unknown:
        raise InvalidInputError(
            f"serving_capacity got unknown keyword(s) {', '.join(sorted(unknown))}; it takes "
            f"gpu, context, concurrency, {', '.join(ServingOptions.__annotations__)}."
        )
    new_tokens, cache = options.get("new_tokens", 256), options.get("cache", "dynamic")
    precision, given = options.get("precision", "bf16"), options.get("table", ())
    progress = options.get("progress")
    quantize = options.get("quantize")
    around = given == "around"
    if isinstance(given, str) and not around:
        raise InvalidInputError(
            f"table={given!r} is neither contexts nor 'around': give the contexts to show the "
            "largest concurrency at, e.g. table=(2048, 8192), or 'around' (powers of two from a "
            "quarter of the answer's context to four times it)."
        )
    table: tuple[int, ...] = () if isinstance(given, str) else tuple(given)
    _check(model, context, concurrency, new_tokens, cache, table)
    techniques = {"quantize": quantize} if quantize is not None else {}
    search = _Search(model, target, precision, cache, new_tokens, progress, techniques)
    limit = search.max_positions()
    for length in (context, *table):
        if length is not None and limit is not None and length > limit:
            raise InvalidInputError(
                f"context={length} is longer than {model}'s {limit} positions "
                "(max_position_embeddings): give a context of at most that, or a model made "
                "for longer sequences."
            )
    if context is not None:
        found = search.largest_concurrency(context)
        asked_context, answer = context, found.concurrency if found else 0
    else:
        assert concurrency is not None
        found = search.longest_context(concurrency, limit)
        asked_context, answer = (found.context if found else 0), concurrency
    if around and asked_context:
        table = _around(asked_context, new_tokens, limit)
    rows = [r for c in table if (r := search.largest_concurrency(c)) is not None]
    first = search.first
    weights = 0 if first is None else _weights(first)
    contexts = sorted({c for c in (asked_context, *table) if c})
    return ServingCapacity(
        model=model,
        gpu=target,
        precision=precision,
        cache=cache,
        new_tokens=new_tokens,
        context=asked_context,
        concurrency=answer,
        best=found,
        weights=weights,
        kv_cache_per_sequence=search.kv_bytes(asked_context or new_tokens + 1),
        outside_pytorch=0 if first is None else first.non_pytorch,
        kv_cache_by_context={c: search.kv_bytes(c) for c in contexts},
        points=sorted(search.points.values(), key=lambda p: (p.context, p.concurrency)),
        table=rows,
        notes=search.notes(),
        versions={k: v for k, v in installed_versions().to_dict().items() if v},
        quantize=quantize,
    )


def kv_cache_bytes(config: Any, context: int, element_size: int) -> int:
    """A sequence's KV cache at ``context`` tokens from a transformers config: keys and values
    of every layer's key/value heads, a sliding-window layer keeping only its window."""
    layers = int(getattr(config, "num_hidden_layers", 0) or 0)
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = getattr(config, "head_dim", None) or (
        int(getattr(config, "hidden_size", 0)) // max(heads, 1)
    )
    window = getattr(config, "sliding_window", None)
    kinds = list(getattr(config, "layer_types", None) or ["full_attention"] * layers)
    per_token = 2 * kv_heads * int(head_dim) * element_size
    total = 0
    for kind in kinds[:layers]:
        tokens = min(context, window) if (kind == "sliding_attention" and window) else context
        total += tokens * per_token
    return total


class _Search:
    """The traces of one serving question, kept by (context, concurrency)."""

    def __init__(
        self,
        model: str,
        gpu: GPU,
        precision: str,
        cache: str,
        new_tokens: int,
        progress: Progress | None,
        techniques: dict[str, Any],
    ) -> None:
        self.model, self.gpu, self.precision = model, gpu, precision
        self.techniques = techniques  # the model's quantization, as make_workload takes it
        self.cache, self.new_tokens, self.progress = cache, new_tokens, progress
        self.points: dict[tuple[int, int], ServingPoint] = {}
        self.first: Estimate | None = None
        self._config: Any = None
        self._notes: list[str] = []

    def at(self, context: int, concurrency: int) -> ServingPoint:
        """The point of ``concurrency`` sequences of ``context`` tokens (traced once)."""
        key = (context, concurrency)
        if key not in self.points:
            try:
                workload = self._workload(context, concurrency)
            except InvalidInputError as err:
                if concurrency == 1:  # the question itself is wrong: say so
                    raise
                # a batch memfit refuses to build (its logits' bound is beyond any GPU): as
                # far from fitting as can be, and not traced
                self.points[key] = ServingPoint(context, concurrency, 0, 0, 0, False, str(err))
                return self.points[key]
            est = estimate_workload(workload)
            self.first = self.first or est
            if not self._notes:
                # the step is memfit's own generate call, not the user's, and how memfit builds
                # the model is not how a server loads it
                self._notes = [n for n in est.notes if not n.startswith(_NOT_SERVING)]
            needed = est.peak_reserved + est.non_pytorch
            self.points[key] = ServingPoint(
                context,
                concurrency,
                est.peak_allocated,
                est.peak_reserved,
                needed,
                needed <= self.gpu.total,
            )
            if self.progress is not None:
                self.progress(len(self.points), f"{concurrency} x {context} tokens")
        return self.points[key]

    def _workload(self, context: int, concurrency: int) -> Any:
        return make_workload(
            self.model,
            batch_size=concurrency,
            seq_len=context - self.new_tokens,
            mode="infer",
            precision=self.precision,
            step_fn=_generate(self.new_tokens, self.cache),
            gpu=self.gpu,
            techniques=self.techniques,
        )

    def largest_concurrency(self, context: int) -> ServingPoint | None:
        """The point of the most sequences of ``context`` tokens that fit (None: not one)."""
        found = _largest(lambda n: self.at(context, n).fits, 1, MAX_CONCURRENCY)
        return None if found is None else self.at(context, found)

    def longest_context(self, concurrency: int, limit: int | None) -> ServingPoint | None:
        """The point of the longest context ``concurrency`` sequences fit at (None: not the
        shortest)."""
        top = limit if limit is not None else 1 << 20
        found = _largest(lambda c: self.at(c, concurrency).fits, self.new_tokens + 1, top)
        return None if found is None else self.at(found, concurrency)

    def config(self) -> Any:
        if self._config is None:
            import torch

            from memfit.workload import resolve_model

            with torch.device("meta"):
                built = resolve_model(self.model).build()
            self._config = getattr(built, "config", None)
        return self._config

    def max_positions(self) -> int | None:
        limit = getattr(self.config(), "max_position_embeddings", None)
        return int(limit) if isinstance(limit, int) else None

    def kv_bytes(self, context: int) -> int:
        config = self.config()
        if config is None:
            return 0
        size = 4 if self.precision == "fp32" else 2
        return kv_cache_bytes(config, context, size)

    def notes(self) -> list[str]:
        grown = (
            "allocated for the whole context when generate starts"
            if self.cache == "static"
            else "grown a token at a time"
        )
        return [
            _NOT_MODELLED.format(prompt="context - new_tokens", new=self.new_tokens),
            f"transformers' {self.cache} cache, {grown}",
            *self._notes,
        ]


def _around(context: int, new_tokens: int, limit: int | None) -> tuple[int, ...]:
    """Powers of two from a quarter of ``context`` to four times it, each with room for a
    prompt before ``new_tokens`` and within the model's ``limit`` positions, ``context`` aside
    (it is the answer's)."""
    low, high = max(context // 4, new_tokens + 1), context * 4
    if limit is not None:
        high = min(high, limit)
    power = 1 << max(low - 1, 1).bit_length()
    out = []
    while power <= high:
        if power != context:
            out.append(power)
        power *= 2
    return tuple(out)


def _largest(fits: Callable[[int], bool], low: int, top: int) -> int | None:
    """The largest ``n`` from ``low`` to ``top`` for which ``fits(n)`` (it holds up to some
    ``n`` and not beyond), by doubling from ``low`` and then halving the gap; None where
    ``low`` does not fit."""
    if not fits(low):
        return None
    high = low * 2
    while high <= top and fits(high):
        low, high = high, high * 2
    high = min(high, top + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _generate(new_tokens: int, cache: str) -> Callable[[Any, Any], Any]:
    """The serving step: generate ``new_tokens`` greedy tokens for every sequence."""

    def step(model: Any, batch: Any) -> Any:
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask") if k in batch}
        options: dict[str, Any] = {
            "max_new_tokens": new_tokens,
            "min_new_tokens": new_tokens,
            "do_sample": False,
        }
        eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if eos is not None:
            options["pad_token_id"] = eos[0] if isinstance(eos, list) else eos
        if cache == "static":
            options["cache_implementation"] = "static"
        return model.generate(**inputs, **options)

    return step


def _weights(est: Estimate) -> int:
    return est.by_category.get(Category.PARAMETER, 0) + est.by_category.get(Category.BUFFER, 0)


def _check(
    model: object,
    context: int | None,
    concurrency: int | None,
    new_tokens: int,
    cache: str,
    table: tuple[int, ...],
) -> None:
    if not isinstance(model, str):
        raise InvalidInputError(
            f"model={model!r} is not a model name: serving capacity takes a name memfit builds "
            "with its batches (gpt2, hf:ORG/NAME, hf:PATH/config.json, path/to/file.py:factory)."
        )
    if (context is None) == (concurrency is None):
        raise InvalidInputError(
            "Give context= (the largest concurrency at that many tokens a sequence) or "
            "concurrency= (the longest context that many sequences fit at), one of them."
        )
    for what, value in (("context", context), ("concurrency", concurrency)):
        if value is not None and (type(value) is not int or value < 1):
            raise InvalidInputError(f"{what}={value!r} is not a whole number >= 1.")
    if type(new_tokens) is not int or new_tokens < 1:
        raise InvalidInputError(
            f"new_tokens={new_tokens!r} is not a whole number >= 1: give the tokens each "
            "request generates (256 by default)."
        )
    for length in (context, *table):
        if length is not None and (type(length) is not int or length <= new_tokens):
            raise InvalidInputError(
                f"context={length!r} leaves no prompt before new_tokens={new_tokens}: a "
                "context counts the prompt and the tokens generated; give a longer context or "
                "fewer new tokens."
            )
    if cache not in CACHES:
        raise InvalidInputError(
            f"cache={cache!r} is not one of transformers' caches memfit traces: give "
            f"{' or '.join(repr(c) for c in CACHES)}."
        )
