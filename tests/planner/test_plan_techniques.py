"""The planner's search of memfit.technique's techniques: a technique is tried where what it
saves could make a step fit, chosen where only it fits, its time counted, its words in the
plan; never tried where the step fits faster without it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import memfit
from memfit.planner import Plan, plan

ON_HOST = (("host_optimizer", True),)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 2048))


def batch_of(n: int) -> torch.Tensor:
    return torch.randn(n, 2048)


def _llama(hidden: int = 256) -> tuple[Any, Any]:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=1000,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
    )

    def llama() -> nn.Module:
        return transformers.LlamaForCausalLM(config)

    def tokens(n: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 1000, (n, 64))
        return {"input_ids": ids, "labels": ids}

    return llama, tokens


def needed(**options: Any) -> int:
    e = memfit.estimate(mlp, lambda: batch_of(1), gpu="h200", optimizer="adamw-fused", **options)
    return e.peak_reserved + e.non_pytorch


def planned(budget_bytes: int, **options: Any) -> Plan:
    return plan(
        mlp(),
        batch_of=batch_of,
        budget=f"{budget_bytes // 2**20}MiB",
        global_batch=1,
        batch_size=1,
        precisions=("fp32",),
        checkpointing=(False,),
        optimizers=("adamw-fused",),
        workers=1,
        **options,
    )


def test_where_only_the_optimizer_on_the_host_fits_the_plan_chooses_it() -> None:
    plain, hosted = needed(), needed(techniques={"host_optimizer": True})
    assert hosted < plain
    p = planned(int((plain + hosted) / 2 / 0.95))  # the default margin keeps 5% free
    assert p.chosen is not None
    assert p.chosen.candidate.techniques == ON_HOST
    assert "optimizer on the host" in p.chosen.changes
    assert "optimizer on the host" in p.chosen.candidate.describe()
    assert p.chosen.candidate.to_dict()["techniques"] == {"host_optimizer": True}
    without = [e for e in p.candidates if not e.candidate.techniques]
    assert without and not any(e.fits for e in without)
    # its copies and its host step make it slower than the same step on the GPU
    assert p.chosen.step_seconds > min(e.step_seconds for e in without)


def test_where_the_step_fits_without_it_it_is_not_traced() -> None:
    p = planned(int(needed() * 4))
    assert p.chosen is not None and not p.chosen.candidate.techniques
    assert not any(e.candidate.techniques for e in p.candidates)


def test_a_candidate_with_it_is_the_estimate_with_it() -> None:
    p = planned(int((needed() + needed(techniques={"host_optimizer": True})) / 2 / 0.95))
    assert p.chosen is not None
    settings = p.chosen.candidate.settings()
    e = memfit.estimate(mlp, batch_of=batch_of, gpu="h200", **settings)
    assert e.peak_reserved == p.chosen.peak_reserved


def test_a_technique_that_changes_what_is_trained_is_kept_on_every_candidate() -> None:
    peft = pytest.importorskip("peft")
    llama, tokens = _llama(128)
    lora = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    p = plan(
        llama(),
        batch_of=tokens,
        budget="2GiB",
        global_batch=4,
        batch_size=4,
        precisions=("bf16-mixed",),
        checkpointing=(False,),
        optimizers=("adamw-fused",),
        workers=1,
        techniques={"lora": lora},
    )
    assert p.candidates and all(
        dict(e.candidate.techniques)["lora"].config is lora for e in p.candidates
    )
    assert p.chosen is not None and not any("LoRA" in c for c in p.chosen.changes)


def test_a_techniques_time_counts_what_the_steps_train() -> None:
    from memfit.planner import calibration_for
    from memfit.planner._search import techniques_seconds
    from memfit.workload import make_workload

    pytest.importorskip("peft")
    llama, tokens = _llama(256)

    def seconds(techniques: dict[str, object]) -> float:
        w = make_workload(llama, lambda: tokens(2), techniques=techniques)
        return techniques_seconds(w, calibration_for(memfit.resolve_gpu("h200"))[0])

    full = seconds({"host_optimizer": True})
    adapters = seconds({"host_optimizer": True, "lora": 4})
    assert 0 < adapters < full / 10  # only the adapters are copied and stepped on the host


def _llama_plan(budget_bytes: int, **options: Any) -> Plan:
    llama, tokens = _llama(1024)
    return plan(
        llama(),
        batch_of=tokens,
        budget=f"{budget_bytes // 2**20}MiB",
        global_batch=2,
        batch_size=2,
        precisions=("bf16",),
        checkpointing=(True,),
        optimizers=("adamw-fused",),
        offloads=(),
        workers=1,
        **options,
    )


def _llama_needed(**options: Any) -> int:
    llama, tokens = _llama(1024)
    e = memfit.estimate(
        llama,
        lambda: tokens(1),
        gpu="h200",
        precision="bf16",
        activation_checkpointing=True,
        optimizer="adamw-fused",
        batch_held=True,
        **options,
    )
    return e.peak_reserved + e.non_pytorch


def test_lora_is_added_only_where_allowed_and_then_said() -> None:
    pytest.importorskip("peft")
    full, adapted = _llama_needed(), _llama_needed(techniques={"lora": 16})
    assert adapted < full
    budget = int((full + adapted) / 2 / 0.95)
    kept = _llama_plan(budget)  # full fine-tuning fits with the optimizer on the host only
    assert not any("lora" in dict(e.candidate.techniques) for e in kept.candidates)
    assert not any("changes what is trained" in n for n in kept.notes)
    allowed = _llama_plan(budget, allow=["lora"])
    assert allowed.chosen is not None
    assert allowed.chosen.candidate.techniques == (("lora", 16),)
    assert "LoRA rank 16" in allowed.chosen.changes
    assert any("changes what is trained" in n for n in allowed.notes)


def test_a_plan_that_adds_lora_is_not_applied() -> None:
    pytest.importorskip("peft")
    full, adapted = _llama_needed(), _llama_needed(techniques={"lora": 16})
    p = _llama_plan(int((full + adapted) / 2 / 0.95), allow=("lora",))
    llama, _ = _llama(1024)
    model = llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters())
    with pytest.raises(memfit.InvalidInputError, match="changes what the model trains"):
        memfit.apply(model, optimizer, p)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_four_bit_weights_are_added_beside_lora_only() -> None:
    from memfit.planner._search import Evaluator
    from memfit.planner._technique_search import _allowed_changes

    llama, tokens = _llama()
    base = memfit.make_workload(llama, batch_of=tokens, batch_size=1)
    ev = Evaluator(base, memfit.resolve_gpu("h200"), 0, None, None, None)  # type: ignore[arg-type]
    names = [
        [t.option.keyword for t, _ in change]
        for change in _allowed_changes(ev, ("quantize", "lora"))
    ]
    assert names == [["lora"], ["quantize", "lora"]]
    assert _allowed_changes(ev, ("quantize",)) == []


def test_a_model_lora_cannot_adapt_is_said_and_the_plan_goes_on() -> None:
    pytest.importorskip("peft")
    p = planned(int(needed() * 0.9 / 0.95), allow=["lora"])  # it does not fit as it is
    assert any("LoRA rank 16 was allowed but cannot be added" in n for n in p.notes)
    assert not any("lora" in dict(e.candidate.techniques) for e in p.candidates)


@pytest.mark.parametrize(
    ("allow", "said"),
    [
        (["host_optimizer"], "the plan tries it anyway"),
        (["dora"], "names no technique memfit knows"),
        ([3], "is not a list of technique names"),
    ],
)
def test_what_cannot_be_allowed_is_refused(allow: Any, said: str) -> None:
    with pytest.raises(memfit.InvalidInputError, match=said):
        plan(mlp(), batch_of=batch_of, budget="4GiB", batch_size=1, allow=allow)


def test_the_command_line_allows_techniques_by_name() -> None:
    from memfit.cli._parser import make_parser
    from memfit.cli._plan_cmd import _plan_options

    args = make_parser().parse_args(["plan", "gpt2", "--gpu", "h100", "--allow", "lora"])
    assert _plan_options(args)["allow"] == ["lora"]
    assert "allow" not in _plan_options(make_parser().parse_args(["plan", "gpt2", "--gpu", "h100"]))
    with pytest.raises(SystemExit):
        make_parser().parse_args(["plan", "gpt2", "--gpu", "h100", "--allow", "offload"])
