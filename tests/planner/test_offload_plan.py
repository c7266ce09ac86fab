"""The planner's activation offload search: from the fastest plan found with checkpointing, fewer
blocks checkpointed and the rest offloaded, each a trace, kept only where faster; ``offloads=()``
searches none; bad values refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(n_layer=12, n_embd=128, n_head=4, vocab_size=1000, n_positions=256)
    )


def _batch_of(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (n, 256))
    return {"input_ids": ids, "labels": ids}


def _plan(
    build: object = _gpt2, batch_size: int = 8, budget: str = "1.2GiB", **kwargs: object
) -> memfit.Plan:
    # 1.2 GiB: no checkpointing at micro-batch 8 needs 1.23 GiB, full 0.90 (see the estimates)
    return memfit.plan(  # type: ignore[misc]
        build,
        batch_of=_batch_of,
        batch_size=batch_size,
        budget=budget,
        margin=0.0,
        precisions=("fp32",),
        optimizers=("adamw-fused",),
        workers=1,
        **kwargs,
    )


def test_fewer_checkpointed_blocks_with_the_rest_offloaded_are_weighed() -> None:
    plan = _plan()
    chosen = plan.chosen
    assert chosen is not None and chosen.candidate.checkpointing not in (False, True)
    offloaded = [e for e in plan.candidates if e.candidate.offload]
    assert offloaded, [e.candidate.describe() for e in plan.candidates]
    best = offloaded[0]
    assert best.candidate.micro_batch == chosen.candidate.micro_batch
    assert best.candidate.offload == 1.0
    # fewer blocks recomputed than the plan it started from, and the memory estimated as such
    assert best.candidate.checkpointing is False or (
        best.candidate.checkpointing < chosen.candidate.checkpointing  # type: ignore[operator]
    )
    assert "activation offload of the blocks not checkpointed" in best.candidate.describe()
    settings = best.candidate.settings()
    assert settings["offload"] == 1.0
    # the plan counts the batch the caller holds through the step (batch_held)
    again = memfit.estimate(_gpt2, batch_of=_batch_of, gpu="1.2GiB", batch_held=True, **settings)
    assert again.peak_reserved == best.peak_reserved
    # the plan keeps what is fastest: offload's copies made this one slower here
    assert chosen.step_seconds <= best.step_seconds or chosen.candidate.offload


def test_offloads_empty_searches_none() -> None:
    plan = _plan(offloads=())
    assert not [
        e for e in plan.candidates if e.candidate.offload or e.candidate.offload_checkpoints
    ]


def _eight_layers() -> nn.Module:
    from tests.workload.tiny_gpt2 import tiny_gpt2

    return tiny_gpt2(n_layer=8)


def _plan_32(**kwargs: object) -> memfit.Plan:
    # 1 GiB: full checkpointing needs 1,078 MiB at micro-batch 32 and 966 at 16; with the
    # checkpointed blocks' inputs offloaded, 1,010 at 32 (see the estimates)
    return _plan(_eight_layers, 32, "1GiB", **kwargs)


def test_offloaded_checkpoints_take_a_larger_micro_batch_than_full_checkpointing_fits() -> None:
    plan = _plan_32()
    chosen = plan.chosen
    assert chosen is not None, [e.candidate.describe() for e in plan.candidates]
    c = chosen.candidate
    assert (c.micro_batch, c.checkpointing, c.offload_checkpoints) == (32, True, True)
    assert "checkpointed blocks' inputs offloaded" in c.describe()
    full = [
        e
        for e in plan.candidates
        if e.candidate.micro_batch == 32
        and e.candidate.checkpointing is True
        and not e.candidate.offload_checkpoints
    ]
    assert full and not any(e.fits for e in full)
    again = memfit.estimate(
        _eight_layers, batch_of=_batch_of, gpu="1GiB", batch_held=True, **c.settings()
    )
    assert again.peak_reserved == chosen.peak_reserved
    assert not [e for e in _plan_32(offloads=()).candidates if e.candidate.offload_checkpoints]


@pytest.mark.parametrize("value", ["1", 2.0, [-0.5]])
def test_offloads_that_are_no_list_of_shares_are_refused(value: object) -> None:
    with pytest.raises(InvalidInputError, match=r"offload"):
        _plan(offloads=value)


class _Evaluator:
    """The planner's evaluator with made-up step times: offloaded, a bf16-mixed step is faster
    than an fp32 one (half the bytes to copy), 10 ms more per block still recomputed."""

    def __init__(self, starts: list[tuple[str, float, float]]) -> None:
        from types import SimpleNamespace

        from memfit.planner._plan_result import Candidate, Evaluated

        self.calibration = SimpleNamespace(pinned=True)
        self.seen: dict[Candidate, Evaluated] = {}
        self._evaluated = Evaluated
        for precision, share, seconds in starts:
            c = Candidate(2, 4, precision, share, "adamw-fused")
            self.seen[c] = Evaluated(c, 0, 0, 0, seconds, 1.0, None, "host", True, ())

    def evaluate(self, candidates: list[object]) -> list[object]:
        for c in candidates:
            if c not in self.seen:
                kept = round(c.checkpointing * 12) if c.checkpointing else 0  # type: ignore[attr-defined]
                base = 0.60 if c.precision == "bf16-mixed" else 0.70  # type: ignore[attr-defined]
                self.seen[c] = self._evaluated(
                    c, 0, 0, 0, base + 0.01 * kept, 1.0, None, "host", True, ()
                )
        return [self.seen[c] for c in candidates]


def test_offload_is_searched_from_each_precision_that_ties_with_the_fastest() -> None:
    from memfit.planner._offload_search import search_offload

    # Qwen2.5-0.5B at 12 GiB (planned 2026-12-03): fp32 with 75% of the blocks checkpointed 1% ahead
    # of bf16-mixed with 92%; offloaded, bf16-mixed's steps are the faster
    ev = _Evaluator([("fp32", 0.75, 0.951), ("bf16-mixed", 0.9167, 0.960), ("fp16", 1.0, 2.0)])
    search_offload(ev, {"offload": (1.0,), "blocks": (12,)}, None)  # type: ignore[arg-type]
    offloaded = {
        (c.precision, c.checkpointing)
        for c in ev.seen
        if c.offload  # type: ignore[attr-defined]
    }
    assert ("bf16-mixed", False) in offloaded and ("fp32", False) in offloaded
    assert not any(p == "fp16" for p, _ in offloaded)  # not within the tie
    best = min((e for c, e in ev.seen.items() if c.offload), key=lambda e: e.step_seconds)
    assert best.candidate.precision == "bf16-mixed"
