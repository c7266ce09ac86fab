"""memfit.plan on real small models (CPU): the fastest configuration that fits, the ranking, a
budget nothing fits, and bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit.planner import Plan, model_key, plan

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def gpt2(width: int = 64, vocab: int = 128) -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=width, n_head=2, vocab_size=vocab, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def tokens(n: int, vocab: int = 128, seq: int = 64) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, vocab, (n, seq))
    return {"input_ids": ids, "labels": ids}


def small_plan(**options: Any) -> Plan:
    settings: dict[str, Any] = {
        "budget": "1GiB",
        "global_batch": 8,
        "batch_size": 8,
        "precisions": ("bf16-mixed", "fp32"),
        "checkpointing": (False, True),
        "workers": 1,
        **options,
    }
    return plan(gpt2(), batch_of=tokens, **settings)


@pytest.fixture(scope="module")
def planned() -> Plan:
    return small_plan()


def test_the_chosen_plan_is_the_fastest_candidate_that_fits(planned: Plan) -> None:
    assert planned.chosen is not None and planned.fits
    fitting = [e for e in planned.candidates if e.fits]
    fastest = min(e.step_seconds for e in fitting)
    tied = [e for e in fitting if e.step_seconds <= fastest * 1.05]  # a tie: the model's error
    assert planned.chosen in tied
    step = planned.usable // 100  # memory closer than 1% of the usable is no headroom
    assert (len(planned.chosen.changes), planned.chosen.needed // step) == min(
        (len(e.changes), e.needed // step) for e in tied
    )
    assert all(e.needed <= planned.usable for e in fitting)
    assert planned.usable == int(planned.budget * 0.95)
    c = planned.chosen.candidate
    assert c.micro_batch * c.accumulation == planned.global_batch == 8


def test_candidates_are_ranked_fitting_first_and_each_says_what_changes(planned: Plan) -> None:
    fits = [e.fits for e in planned.candidates]
    assert fits == sorted(fits, reverse=True)
    assert planned.baseline is not None and planned.baseline.candidate.precision == "fp32"
    assert planned.baseline.changes == ()
    assert any("precision bf16-mixed" in e.changes for e in planned.candidates)
    # the search covered both precisions, both checkpointing settings, optimizer variants
    # and both allocator settings
    seen = {
        (e.candidate.precision, e.candidate.checkpointing, e.candidate.optimizer)
        for e in planned.candidates
    }
    assert {p for p, _, _ in seen} == {"bf16-mixed", "fp32"}
    assert {c for _, c, _ in seen} == {False, True}
    assert {o for _, _, o in seen} >= {"adamw-fused", "adamw-foreach", "adamw-forloop"}
    assert {e.candidate.allocator_config for e in planned.candidates} == {
        "",
        "expandable_segments:True",
    }


def test_the_pareto_front_is_not_beaten_on_both_memory_and_time(planned: Plan) -> None:
    front = planned.pareto()
    assert front
    for e in planned.candidates:
        for f in front:
            assert not (e.needed < f.needed and e.step_seconds < f.step_seconds)


def test_a_host_bound_choice_says_its_seconds_depend_on_the_cpu(planned: Plan) -> None:
    assert planned.chosen is not None and planned.chosen.bound == "host"  # a tiny GPT-2
    assert any(n.startswith("the chosen step waits on the host") for n in planned.notes)


def test_a_gpu_bound_choice_has_no_such_note() -> None:
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))
    result = plan(
        model,
        batch_of=lambda n: torch.randn(n, 4096),
        budget="80GiB",
        global_batch=16384,
        batch_size=16384,
        precisions=("bf16-mixed",),
        workers=1,
        loss_fn=lambda m, b: m(b).sum(),
    )
    assert result.chosen is not None and result.chosen.bound == "gpu"
    assert not any("waits on the host" in n for n in result.notes)


def test_the_plan_knows_its_model_and_says_what_it_assumed(planned: Plan) -> None:
    assert planned.model_key == model_key(gpt2())
    assert planned.calibration.startswith("measured")
    assert planned.traces > 0 and planned.seconds > 0
    assert "torch" in planned.versions
    data = json.loads(planned.to_json())
    assert data["chosen"] == planned.chosen.to_dict()  # type: ignore[union-attr]
    assert len(data["candidates"]) == len(planned.candidates)


def test_the_chosen_plan_estimates_what_the_gpu_would_take(planned: Plan) -> None:
    assert planned.chosen is not None
    c = planned.chosen.candidate
    alone = memfit.estimate(
        gpt2(), batch_of=tokens, gpu="1GiB", **c.settings()
    )  # the same configuration estimated on its own: the plan's memory is the estimate's
    assert alone.peak_reserved <= planned.chosen.peak_reserved


def test_a_budget_nothing_fits_names_the_smallest_and_how_far_over() -> None:
    big = gpt2(width=1024, vocab=50257)
    result = plan(
        big,
        batch_of=lambda n: tokens(n, 50257),
        budget="1GiB",
        global_batch=4,
        batch_size=4,
        precisions=("bf16-mixed",),
        checkpointing=(True,),
        optimizers=("adamw-fused",),
        workers=1,
    )
    assert not result.fits and result.chosen is None
    assert result.smallest is not None and result.shortfall > 0
    assert result.smallest.needed == min(e.needed for e in result.candidates)
    assert result.shortfall == result.smallest.needed - result.usable
    assert any("GPU with at least" in line for line in result.would_fit)
    # FSDP2 over 2, 4 and 8 GPUs of this size estimated: named if one fits, else said
    sharded = [line for line in result.would_fit if "FSDP2" in line]
    assert sharded and ("each rank then needs" in sharded[0] or "either" in sharded[0])
    assert "nothing fits" in str(result)


def test_a_model_without_repeated_blocks_is_not_searched_for_checkpointing() -> None:
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))

    def batch_of(n: int) -> torch.Tensor:
        return torch.randn(n, 32)

    result = plan(
        model,
        batch_of=batch_of,
        budget="1GiB",
        global_batch=4,
        batch_size=4,
        workers=1,
        loss_fn=lambda m, b: m(b).sum(),
    )
    assert result.fits
    assert {e.candidate.checkpointing for e in result.candidates} == {False}


def test_two_workers_find_what_one_does() -> None:
    one = small_plan(precisions=("bf16-mixed",))
    two = small_plan(precisions=("bf16-mixed",), workers=2)
    assert {e.candidate for e in one.candidates} == {e.candidate for e in two.candidates}
    assert one.chosen == two.chosen


def test_partial_checkpointing_spends_what_the_budget_leaves() -> None:
    def deep() -> nn.Module:
        return gpt2_layers(4)

    def batch_of(n: int) -> dict[str, torch.Tensor]:
        return tokens(n, seq=256)

    settings: dict[str, Any] = {
        "global_batch": 8,
        "batch_size": 8,
        "precisions": ("fp32",),
        "checkpointing": (False, True),
        "optimizers": ("adamw-fused",),
        "workers": 1,
    }
    roomy = plan(deep(), batch_of=batch_of, budget="8GiB", **settings)
    needs = {
        e.candidate.checkpointing: e.needed
        for e in roomy.candidates
        if e.candidate.micro_batch == 8 and not e.candidate.allocator_config
    }
    middle = (needs[False] + needs[True]) // 2  # half the blocks' saving: about 2 of 4
    tight = plan(deep(), batch_of=batch_of, budget=f"{int(middle / 0.95) >> 10}KiB", **settings)
    partial = [
        e
        for e in tight.candidates
        if isinstance(e.candidate.checkpointing, float) and e.candidate.micro_batch == 8
    ]
    assert partial
    fits = [e for e in partial if e.fits]
    assert fits and all(needs[True] < e.needed < needs[False] for e in fits)
    fewest = min(e.candidate.checkpointing for e in fits)  # type: ignore[type-var]
    assert all(  # one block fewer does not fit: the fewest that fit was found
        not e.fits
        for e in partial
        if e.candidate.checkpointing < fewest  # type: ignore[operator]
    )
    assert "of the blocks" in fits[0].candidate.describe()


def gpt2_layers(layers: int) -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=layers,
        n_embd=128,
        n_head=2,
        vocab_size=128,
        n_positions=256,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def test_a_precision_whose_floor_cannot_tie_the_fastest_is_not_searched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dataclasses

    from memfit.planner import _plan

    real = _plan.calibration_for

    def slow_fp32(gpu: Any, path: Any = None) -> Any:  # fp32 products a million times slower
        calibration, note = real(gpu, path)
        curves = dict(calibration.curves)
        curves["mm:fp32"] = tuple((w, t * 1e6) for w, t in curves["mm:fp32"])
        return dataclasses.replace(calibration, curves=curves), note

    monkeypatch.setattr(_plan, "calibration_for", slow_fp32)
    result = small_plan(batch_size=8, precision="bf16-mixed")
    assert result.chosen is not None
    assert {e.candidate.precision for e in result.candidates} == {"bf16-mixed"}
    monkeypatch.setattr(_plan, "calibration_for", real)  # measured rates: fp32 is searched
    assert "fp32" in {e.candidate.precision for e in small_plan().candidates}


def test_the_global_batch_alone_is_the_step_you_would_run() -> None:
    # a model name and no batch_size: the workload is the whole global batch at once, and the
    # plan searches the micro-batches that divide it (before, make_workload asked for a batch)
    pytest.importorskip("torchvision")
    result = plan(
        "tv:resnet18",
        budget="8GiB",
        global_batch=8,
        precisions=("fp32",),
        checkpointing=(False,),
        optimizers=("adamw",),
        workers=1,
    )
    assert result.global_batch == 8
    assert result.chosen is not None
    c = result.chosen.candidate
    assert c.micro_batch * c.accumulation == 8


def test_an_fsdp2_plan_nothing_fits_names_more_ranks_that_would() -> None:
    # eight wide blocks over 2 ranks do not fit 2900 MiB (3.3 GiB a rank); over 4 they do
    # (2.6 GiB): the answer names the world size, and that world size's estimate agrees
    def model() -> nn.Module:
        config = transformers.GPT2Config(
            n_layer=8, n_embd=1024, n_head=2, vocab_size=50257, bos_token_id=0, eos_token_id=0
        )
        return transformers.GPT2LMHeadModel(config)

    settings: dict[str, Any] = {
        "batch_of": lambda n: tokens(n, 50257),
        "strategy": "fsdp2",
        "precision": "bf16-mixed",
    }
    result = plan(
        model(),
        budget="2900MiB",
        global_batch=1,
        batch_size=1,
        precisions=("bf16-mixed",),
        checkpointing=(True,),
        optimizers=("adamw-fused",),
        workers=1,
        world_size=2,
        **settings,
    )
    assert not result.fits
    more, offloaded = [w for w in result.would_fit if "FSDP2" in w]  # and the offload on 2
    assert "CPU offload policy" in offloaded and "on 2 GPUs" in offloaded
    line = more
    assert "instead of 2" in line, line
    ranks = int(line.split("FSDP2 on ")[1].split()[0])
    est = memfit.estimate(
        model(),
        gpu="2900MiB",
        world_size=ranks,
        batch_size=1,
        activation_checkpointing=True,
        optimizer="adamw-fused",
        **settings,
    )
    assert est.peak_reserved + est.non_pytorch <= result.usable


def test_the_users_own_precision_is_searched_beside_the_defaults() -> None:
    """A pure bf16 step (half the weights, gradients and optimizer states of bf16-mixed) is in
    the space with every checkpointing: a plan never misses what the user already runs."""
    planned = plan(
        gpt2(), batch_of=tokens, budget="1GiB", global_batch=4, batch_size=4, precision="bf16",
        checkpointing=(False, True), workers=1,
    )  # fmt: skip
    searched = {(e.candidate.precision, e.candidate.checkpointing) for e in planned.candidates}
    assert {("bf16", False), ("bf16", True)} <= searched
    assert {"bf16-mixed", "fp32"} <= {p for p, _ in searched}
    # narrowed on purpose, the search keeps to what was asked
    narrowed = small_plan(precision="bf16", precisions=("fp32",), checkpointing=(False,))
    assert {e.candidate.precision for e in narrowed.candidates} - {"bf16"} == {"fp32"}
