"""memfit.plan with batch models: the micro-batches of one configuration replayed from its traces
at others give the same plan as tracing every candidate (the same choice, every candidate's
numbers), from fewer traces; the choice and the baseline are traced; the plan says what it
replayed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from memfit.planner import Plan, plan
from memfit.trace import _batch_traces

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def tokens(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 128, (n, 64))
    return {"input_ids": ids, "labels": ids}


def planned(batch_model: bool) -> Plan:
    _batch_traces.BATCH_MODEL = batch_model
    try:
        return plan(
            gpt2(),
            batch_of=tokens,
            budget="1GiB",
            global_batch=256,
            batch_size=256,
            precisions=("bf16-mixed", "fp32"),
            checkpointing=(False, True),
            workers=1,
        )
    finally:
        _batch_traces.BATCH_MODEL = True


@pytest.fixture(scope="module")
def plans() -> Iterator[tuple[Plan, Plan]]:
    yield planned(False), planned(True)


def _without_provenance(p: Plan) -> dict[str, Any]:
    out = p.to_dict()
    for e in out["candidates"]:
        e.pop("replayed_from", None)
    for key in ("seconds", "traces", "notes"):
        out.pop(key)
    return out


def test_replayed_micro_batches_give_the_plan_that_tracing_gives(plans: tuple[Plan, Plan]) -> None:
    traced, replayed = plans
    assert replayed.chosen is not None and traced.chosen is not None
    assert replayed.chosen == traced.chosen
    assert _without_provenance(replayed) == _without_provenance(traced)


def test_fewer_traces_and_the_choice_and_baseline_are_traced(plans: tuple[Plan, Plan]) -> None:
    traced, replayed = plans
    assert not any(e.replayed_from for e in traced.candidates)
    derived = [e for e in replayed.candidates if e.replayed_from and e.traced]
    assert derived and replayed.traces <= traced.traces - len(derived) + 2
    assert replayed.traces < traced.traces
    assert replayed.chosen is not None and not replayed.chosen.replayed_from
    assert replayed.baseline is not None and not replayed.baseline.replayed_from
    said = [n for n in replayed.notes if "replayed through the allocator" in n]
    assert len(said) == 1 and f"{len(derived)} of the" in said[0]
    assert not any("replayed through the allocator" in n for n in traced.notes)
    assert all(e.to_dict()["replayed_from"] == list(e.replayed_from) for e in derived)
