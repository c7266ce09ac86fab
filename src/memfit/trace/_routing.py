"""Mixture-of-experts routing in a trace: which expert gets which token, answered as a policy.

A router scores every token against every expert and keeps the ``top_k`` best
(``torch.topk(router_probs, top_k, dim=-1)`` in Mixtral's, Qwen2-MoE's and Qwen3-MoE's routers).
The scores come from the weights, which a trace does not have, so the chosen indices have no
value, and every op that sizes a tensor from them (``nonzero``/``where`` per expert in
transformers' eager experts, ``sort``/``histc`` offsets in ``grouped_mm``) would be answered with
its largest size: every expert would get every token. Instead, the router's ``topk`` is given
real indices (a shadow, see :mod:`memfit.trace._shadow`) chosen by a policy:

``loaded`` (the default)
    expert ``e`` gets ``(0.75 + 0.5*e/(E-1))`` times an even share ``tokens*k/E``: loads from
    0.75 to 1.25 times even, rising with the expert's index, ``k`` distinct experts per token.
    Real routers are uneven, and where routing decides tensor sizes their spread is what the
    caching allocator sees: blocks of many sizes, the larger ones after the smaller ones, so
    that freed blocks are too small for the next expert's. 1.25 is the room routers are given
    over an even share (a capacity factor of 1.25 in Switch-style routers), and what a router
    initialised at random gave its busiest expert on an H100 (the privacy filter of
    ``benchmarks/results/2026-12-06-h100-zoo-sweep/``: 1.24); balanced routing estimated that
    training step 2.00% under the reserved peak, loaded 2.14% over it
    (``benchmarks/results/2026-12-07-cpu-zoo-after-routing-gru/``).
``balanced``
    token ``t`` goes to experts ``(t*k + j) mod E`` for ``j < k``: ``k`` distinct experts per
    token, and each expert gets ``tokens*k/E`` tokens, as evenly as integers allow. This is what
    a router trained with a load-balancing loss aims at.
``skewed``
    the worst case for memory: every token goes to the same ``k`` experts (``0 .. k-1``), except
    that the first ``E-k`` tokens send their last choice to one of the other experts each, so
    that every expert is still used. Memory grows with two things routing decides, in
    transformers' eager experts (one expert at a time, forward and backward; the total over
    experts is ``tokens*k`` rows either way): the largest expert's share, which makes the
    largest transients (a token picks ``k`` distinct experts, so no expert can get more than all
    the tokens, and here ``k-1`` experts get all of them and one all but ``E-k``); and how many
    experts are used, since the backward of each used expert's weight slice
    (``gate_up_proj[e]``, ``select_backward``) makes a zero-filled gradient the size of all the
    experts' weights, which the engine then sums. Where the experts' tensors do not depend on
    routing (``grouped_mm`` and ``batched_mm``, transformers 5's default and its alternative,
    work on all ``tokens*k`` rows at once) every policy gives the same memory, and the note
    says so. Where the peak lies outside the experts (the loss, the optimizer step), skewed can
    come out a few MiB under balanced, as cached blocks are reused differently: an H200 showed
    the same (a Mixtral-style model, eager experts, b4 s1024: 12 MB less allocated, 0.2 GiB more
    reserved).

The router is recognised by what its values are, not by its class: a ``topk`` along the last
dimension of a float tensor that has no value (it came from the weights), with at most
:data:`MAX_EXPERTS` candidates, inside a module's forward (a decoding loop's top-k over the
logits runs outside the model, and :mod:`memfit.trace._generate` answers it), whose indices are
then used to compute something from their values (a one-hot mask, a sort, a histogram). A
``topk`` whose indices are never read that way is not named in the notes.

Also here: ``aten._grouped_mm`` on float32 inputs, which CUDA runs (a loop of ``mm`` into one
output, ``_grouped_mm_fallback`` in ATen's GroupedMMUtils.h) but whose meta kernel refuses; the
output is allocated as ``create_grouped_gemm_output_tensor`` allocates it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

__all__ = ["MAX_EXPERTS", "ROUTED_MAX_NUMEL", "Routing", "grouped_mm_output"]

aten = torch.ops.aten
# more candidates than any MoE has experts: a top-k over a vocabulary is not a router
MAX_EXPERTS = 1024
# routing masks (tokens x top_k x experts, int64) may exceed the usual limit of a shadow
ROUTED_MAX_NUMEL = 1 << 26


@dataclass
class _Router:
    module: str
    tokens: int
    experts: int
    top_k: int
    read: bool = False  # its indices were used to compute something
    sized: bool = False  # ... and decided the size of a tensor (nonzero, where, masked_select)


class Routing:
    """Answers routers' choices by a policy and remembers what was routed, for the notes."""

    def __init__(self, policy: str = "loaded") -> None:
        self.policy = policy
        self.module_of: Callable[[], str] = lambda: ""
        self.routers: list[_Router] = []
        self._from = WeakTensorKeyDictionary()  # meta tensor -> index of the router it came from

    # -- recognising the router -------------------------------------------------------------
    def choose(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> Any:
        """For a router's ``topk``: its indices' value under the policy (CPU), else None."""
        if func is not aten.topk.default:
            return None
        scores, k = args[0], args[1]
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
        if not (isinstance(scores, torch.Tensor) and scores.is_floating_point() and largest):
            return None
        if scores.dim() == 0 or dim % scores.dim() != scores.dim() - 1:
            return None
        experts = int(scores.shape[-1])
        if not 1 <= k < experts <= MAX_EXPERTS:
            return None
        tokens = scores.numel() // experts
        module = self.module_of()
        if tokens * k > ROUTED_MAX_NUMEL or not module:
            return None
        indices = out[1]
        self._from[indices] = len(self.routers)
        self.routers.append(_Router(module, tokens, experts, k))
        return self.choices(tokens, experts, k).reshape(indices.shape)

    def choices(self, tokens: int, experts: int, k: int) -> torch.Tensor:
        """The ``(tokens, k)`` expert indices the policy gives: ``k`` distinct experts a token."""
        if self.policy == "skewed":
            chosen = torch.arange(k).expand(tokens, k).contiguous()
            spread = min(tokens, experts - k)  # one token for each otherwise unused expert
            chosen[:spread, k - 1] = torch.arange(k, k + spread)
            return chosen
        if self.policy == "loaded":
            return _from_counts(_loaded_counts(tokens, experts, k), tokens, k)
        slots = torch.arange(tokens).unsqueeze(1) * k + torch.arange(k).unsqueeze(0)
        return slots % experts

    # -- following the choices --------------------------------------------------------------
    def derived(self, args: Any, kwargs: dict[str, Any]) -> int | None:
        """The router an op's inputs came from, if any (and mark that router as read)."""
        if not self.routers:
            return None
        for x in (*args, *kwargs.values()):  # arguments and lists in them: no pytree per op
            for t in x if isinstance(x, (list, tuple)) else (x,):
                if isinstance(t, torch.Tensor):
                    index = self._from.get(t)
                    if index is not None:
                        self.routers[index].read = True
                        return int(index)
        return None

    def sized(self, router: int | None) -> None:
        """A router's choices decided the size of a tensor (per-expert token lists)."""
        if router is not None:
            self.routers[router].sized = True

    def carry(self, router: int | None, out: Any) -> None:
        """Outputs computed from a router's choices are its choices too."""
        if router is None:
            return
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._from[t] = router

    # -- what the estimate says -------------------------------------------------------------
    def notes(self, asked: str | None) -> list[str]:
        read = [r for r in self.routers if r.read]
        if not read:
            if asked is None:
                return []
            return [
                f"moe_routing={asked!r} had no effect: the model made no mixture-of-experts "
                "routing choice (no top-k over expert scores whose indices were used)"
            ]
        shapes = sorted({(r.experts, r.top_k, r.tokens) for r in read})
        where = _modules(sorted({r.module for r in read}))
        out = []
        for experts, k, tokens in shapes:
            if self.policy == "skewed":
                spread = min(tokens, experts - k)
                what = (
                    f"skewed (the worst case): every token goes to the same {k} of {experts} "
                    f"experts (top-{k}), but for {spread} tokens that use each other expert once"
                )
                other = "moe_routing='balanced' gives even routing"
            elif self.policy == "loaded":
                counts = _loaded_counts(tokens, experts, k)
                what = (
                    f"loaded: the {experts} experts get from {2 - LOAD:g} to {LOAD:g} times an "
                    f"even share of the {tokens} tokens (top-{k}, {counts[0]} to {counts[-1]} "
                    "each, the busiest last)"
                )
                other = "moe_routing='balanced' gives even routing, 'skewed' the worst case"
            else:
                share = _fraction(k, experts)
                what = (
                    f"balanced: each of {experts} experts gets {share} of the {tokens} tokens "
                    f"(top-{k}, about {tokens * k // experts} each)"
                )
                other = "moe_routing='skewed' gives the worst case"
            out.append(f"mixture-of-experts routing assumed {what}, in {where}; {other}")
        if not any(r.sized for r in read):
            out.append(
                "mixture-of-experts memory here does not depend on routing: no tensor's size "
                "depends on which experts the tokens go to (the experts compute on fixed-size "
                "rows, such as all tokens*top_k at once or a fixed capacity per expert)"
            )
        return out


LOAD = 1.25  # the busiest expert's tokens over an even share, in the "loaded" policy


def _loaded_counts(tokens: int, experts: int, k: int) -> list[int]:
    """Tokens per expert, rising evenly from ``2 - LOAD`` to :data:`LOAD` times an even share
    and summing to ``tokens * k`` (each the floor or the ceiling of its share: the running sum
    is floored), none over every token (what that cuts goes to the last experts with room)."""
    total = tokens * k
    share = Fraction(total, experts)
    low = (2 - Fraction(LOAD)) * share
    step = 2 * (share - low) / max(experts - 1, 1)
    running = [math.floor(i * low + i * (i - 1) * step / 2) for i in range(experts + 1)]
    counts = [min(tokens, b - a) for a, b in itertools.pairwise(running)]
    left = total - sum(counts)
    for e in reversed(range(experts)):
        more = min(left, tokens - counts[e])
        counts[e] += more
        left -= more
    return counts


def _from_counts(counts: list[int], tokens: int, k: int) -> torch.Tensor:
    """``(tokens, k)`` expert indices with ``counts[e]`` tokens routed to expert ``e`` and ``k``
    distinct experts a token: the experts' slots, in order, are dealt to the tokens column by
    column, so an expert's run of at most ``tokens`` slots lands on distinct tokens."""
    slots = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    return slots.reshape(k, tokens).t().contiguous()


def _fraction(k: int, experts: int) -> str:
    from math import gcd

    g = gcd(k, experts)
    return f"{k // g}/{experts // g}" if k // g != 1 else f"1/{experts // g}"


def _modules(paths: list[str]) -> str:
    """``model.layers.0.mlp.gate`` .. ``model.layers.7.mlp.gate`` as ``model.layers.*.mlp.gate
    (8 routers)``."""
    import re

    if len(paths) == 1:
        return paths[0]
    patterns = sorted({re.sub(r"\.\d+\.", ".*.", p) for p in paths})
    text = ", ".join(patterns)
    return f"{text} ({len(paths)} routers)" if len(paths) > 1 else text


def grouped_mm_output(args: Any, kwargs: dict[str, Any]) -> torch.Tensor | None:
    """``aten._grouped_mm``'s output where the meta kernel refuses float32 and CUDA does not.

    CUDA checks float32, bfloat16 or float16 inputs and runs float32 (and any non-bf16) through
    ``_grouped_mm_fallback``: one ``mm_out`` per group into the output, which
    ``create_grouped_gemm_output_tensor`` allocates with its last dimension's stride padded to
    16 bytes. Nothing else is allocated on the GPU (the offsets are copied to the host).
    """
    mat_a, mat_b = args[0], args[1]
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    if not all(isinstance(t, torch.Tensor) for t in (mat_a, mat_b)):
        return None
    if mat_a.dtype != torch.float32 or mat_b.dtype != torch.float32:
        return None
    out_dtype = kwargs.get("out_dtype") or (args[4] if len(args) > 4 else None) or mat_a.dtype
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:
        if offs is None:
            return None
        size = [int(offs.shape[0]), int(mat_a.shape[0]), int(mat_b.shape[1])]
    elif a2:
        size = [int(mat_a.shape[0]), int(mat_b.shape[-1])]
    elif b2:
        size = [int(mat_a.shape[1]), int(mat_b.shape[1])]
    else:
        size = [int(mat_a.shape[0]), int(mat_a.shape[1]), int(mat_b.shape[-1])]
    align = 16 // out_dtype.itemsize
    padded = (size[-1] + align - 1) // align * align
    stride = [padded, 1] if a2 != b2 else [size[1] * padded, padded, 1]
    return torch.empty_strided(size, stride, dtype=out_dtype, device=mat_a.device)
