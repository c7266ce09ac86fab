"""find_batch_size with a batch model: the same answer and the same estimates as a search that
traces every batch size, from fewer traces; the answer traced; where no model fits, every batch
traced and the result says why."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit.runtime import BatchSizeResult
from memfit.trace import _batch_traces

transformers = pytest.importorskip("transformers")


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=128, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def tokens(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 128, (n, 64))
    return {"input_ids": ids, "labels": ids}


def mixtral() -> nn.Module:
    config = transformers.MixtralConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_local_experts=3,  # top-2 of 3: tokens * 2 / 3 rows an expert, not a line
        num_experts_per_tok=2,
    )
    config._experts_implementation = "eager"
    return transformers.MixtralForCausalLM(config)


@pytest.fixture
def switch() -> Iterator[Callable[[bool], None]]:
    def turn(on: bool) -> None:
        _batch_traces.BATCH_MODEL = on

    yield turn
    _batch_traces.BATCH_MODEL = True


def search(model: Callable[[], nn.Module], **options: Any) -> BatchSizeResult:
    return memfit.find_batch_size(model, tokens, confirm=False, gpu="2GiB", **options)


def numbers(result: BatchSizeResult) -> list[tuple[Any, ...]]:
    return [
        (p.batch_size, p.peak_reserved, p.peak_allocated, p.total, p.alloc_retries)
        for p in result.estimates
    ]


def test_the_search_finds_the_same_batch_from_fewer_traces(
    switch: Callable[[bool], None],
) -> None:
    switch(False)
    traced = search(gpt2)
    switch(True)
    replayed = search(gpt2)
    assert replayed.batch_size == traced.batch_size
    assert numbers(replayed) == numbers(traced)  # every estimate, replayed or not
    assert (replayed.predicted_need, replayed.predicted_peak_reserved) == (
        traced.predicted_need,
        traced.predicted_peak_reserved,
    )
    assert (replayed.per_sample, replayed.limited_by) == (traced.per_sample, traced.limited_by)
    assert traced.replayed == [] and traced.batch_model == ""
    assert sorted(set(traced.traced)) == [p.batch_size for p in traced.estimates]
    assert replayed.replayed and len(set(replayed.traced)) < len(set(traced.traced))
    # the answer's numbers are a trace's: derived, then traced to check
    chosen = next(p for p in replayed.estimates if p.batch_size == replayed.batch_size)
    assert not chosen.replayed
    assert replayed.batch_size in replayed.traced
    assert "traced again to check the replay: the same" in replayed.batch_model
    assert replayed.to_dict()["replayed"] == replayed.replayed


def test_where_no_model_fits_every_batch_is_traced_and_the_result_says_why(
    switch: Callable[[bool], None],
) -> None:
    switch(True)
    result = search(mixtral)
    assert result.replayed == []
    assert sorted(set(result.traced)) == [p.batch_size for p in result.estimates]
    assert result.batch_model.startswith("traced: ")
    assert "no batch model: " in result.batch_model
    assert "not a linear function of the batch" in result.batch_model
    switch(False)
    assert search(mixtral).batch_size == result.batch_size
