"""Mixture-of-experts models: routers answered by a policy (balanced or skewed), said in notes.

Small Mixtral- and Qwen-MoE-style configs (transformers' own classes, no downloads). Routing is
data-dependent: the router's top-k is given balanced (or skewed) choices, so the per-expert
tensors of transformers' eager experts have the sizes that routing gives; grouped_mm (the
default experts implementation) computes on all tokens*top_k rows whatever the routing.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import transformers
from torch import nn

from memfit import estimate
from memfit._gpus import resolve_gpu
from memfit.cli import main
from memfit.trace import trace_workload
from memfit.trace._routing import Routing
from memfit.workload import make_workload

H200 = resolve_gpu("h200")
TOKENS = 2 * 32  # the batch below: 2 sequences of 32 tokens
HIDDEN = 32


def mixtral(impl: str | None = None, experts: int = 4, intermediate: int = 64) -> nn.Module:
    cfg = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=HIDDEN,
        intermediate_size=intermediate,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_local_experts=experts,
        num_experts_per_tok=2,
    )
    if impl is not None:
        cfg._experts_implementation = impl
    return transformers.MixtralForCausalLM(cfg)


def qwen2_moe() -> nn.Module:
    cfg = transformers.Qwen2MoeConfig(
        vocab_size=64,
        hidden_size=HIDDEN,
        intermediate_size=64,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_experts=6,
        num_experts_per_tok=3,
    )
    return transformers.Qwen2MoeForCausalLM(cfg)


def batch(labels: bool = True) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 64, (2, 32))
    return {"input_ids": ids, "labels": ids} if labels else {"input_ids": ids}


def expert_inputs(build, routing: str | None) -> list[int]:
    """Rows of each per-expert input in step 1's forward: ``hidden_states[token_idx]``, the
    gathered copy transformers' eager experts make (aten.index, a new tensor on the GPU too)."""
    trace = trace_workload(make_workload(build, batch(), moe_routing=routing), H200)
    return [
        info.shape[0]
        for info in trace.infos
        if info.module.endswith("mlp.experts")
        and info.phase == "step1.forward"
        and info.op == "index"
        and info.shape[1:] == (HIDDEN,)
    ]


def test_balanced_routing_gives_each_expert_tokens_times_top_k_over_experts():
    rows = expert_inputs(lambda: mixtral("eager"), "balanced")
    assert rows == [TOKENS * 2 // 4] * 4  # every expert, 64 tokens x top-2 / 4 experts


def test_loaded_routing_by_default_rises_from_three_quarters_to_five_quarters_of_even():
    rows = expert_inputs(lambda: mixtral("eager"), None)
    # 64 tokens x top-2 / 4 experts = 32 even: 24, 29.3, 34.7, 40, the running sum floored
    assert rows == [24, 29, 35, 40]


@pytest.mark.parametrize(
    ("tokens", "experts", "k"),
    [(104448, 64, 4), (14336, 320, 12), (10, 8, 2), (3, 4, 3), (1, 8, 2), (100, 3, 2)],
)
def test_loaded_routing_routes_every_slot_to_distinct_experts_within_the_load(
    tokens: int, experts: int, k: int
):
    chosen = Routing("loaded").choices(tokens, experts, k)
    assert chosen.shape == (tokens, k)
    assert all(len(set(row)) == k for row in chosen.tolist())  # k distinct experts a token
    counts = torch.bincount(chosen.flatten(), minlength=experts).tolist()
    even = tokens * k / experts
    for e, count in enumerate(counts):  # rising from 0.75 to 1.25 times even, to a token
        share = even * (0.75 + 0.5 * e / (experts - 1))
        assert math.floor(share) - 1 <= count <= min(tokens, math.ceil(share))


def test_skewed_routing_gives_top_k_experts_nearly_all_tokens_and_uses_every_expert():
    rows = expert_inputs(lambda: mixtral("eager"), "skewed")
    # experts 0 and 1 take every token but for the 2 that use experts 2 and 3 once each
    assert sorted(rows, reverse=True) == [TOKENS, TOKENS - 2, 1, 1]
    assert sum(rows) == TOKENS * 2  # each token still picks top_k distinct experts


def test_skewed_is_the_larger_estimate_where_routing_sizes_tensors():
    build = lambda: mixtral("eager", intermediate=1024)  # noqa: E731  experts dominate
    balanced = estimate(build, batch(), moe_routing="balanced")
    skewed = estimate(build, batch(), moe_routing="skewed")
    assert skewed.peak_allocated > balanced.peak_allocated
    # the difference is bounded by the largest expert's share: at most all tokens' activations
    per_token = (2 * 1024 + 1024 + 1024 + 2 * HIDDEN) * 4 * 2  # fwd + bwd transients, fp32
    assert skewed.peak_allocated - balanced.peak_allocated < TOKENS * per_token + (4 << 20)


def test_grouped_mm_default_does_not_depend_on_routing_and_says_so():
    balanced = estimate(mixtral, batch(), precision="bf16-mixed")
    skewed = estimate(mixtral, batch(), precision="bf16-mixed", moe_routing="skewed")
    assert balanced.peak_allocated == skewed.peak_allocated
    assert any("does not depend on routing" in n for n in balanced.notes)


def test_routing_note_says_the_policy_the_experts_and_where():
    est = estimate(mixtral, batch(), moe_routing="balanced")
    note = next(n for n in est.notes if n.startswith("mixture-of-experts routing assumed"))
    assert "balanced: each of 4 experts gets 1/2 of the 64 tokens (top-2" in note
    assert "model.layers.0.mlp.gate" in note
    assert "moe_routing='skewed' gives the worst case" in note
    skewed = estimate(mixtral, batch(), moe_routing="skewed")
    assert any("routing assumed skewed (the worst case)" in n for n in skewed.notes)
    loaded = estimate(mixtral, batch())
    note = next(n for n in loaded.notes if n.startswith("mixture-of-experts routing assumed"))
    assert "loaded: the 4 experts get from 0.75 to 1.25 times an even share of the 64" in note
    assert "(top-2, 24 to 40 each, the busiest last)" in note


def test_no_largest_size_guess_for_the_router():
    est = estimate(lambda: mixtral("eager"), batch())
    assert not any("largest possible size" in n for n in est.notes)


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_qwen2_moe_estimates_with_a_routing_note(mode: str):
    est = estimate(qwen2_moe, batch(mode == "train"), mode=mode, moe_routing="balanced")
    assert est.peak_allocated > 0
    assert any("each of 6 experts gets 1/2 of the 64 tokens (top-3" in n for n in est.notes)


@pytest.mark.skipif(not hasattr(transformers, "Qwen3MoeForCausalLM"), reason="no Qwen3-MoE")
def test_qwen3_moe_estimates_with_a_routing_note():
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=64,
        hidden_size=HIDDEN,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
    )
    est = estimate(lambda: transformers.Qwen3MoeForCausalLM(cfg), batch())
    assert any(
        "the 8 experts get from 0.75 to 1.25 times an even share of the 64" in n for n in est.notes
    )


def test_moe_routing_for_a_dense_model_is_said_in_the_notes():
    dense = lambda: nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))  # noqa: E731
    est = estimate(dense, torch.randn(8, 16), moe_routing="skewed")
    assert any("moe_routing='skewed' had no effect" in n for n in est.notes)
    plain = estimate(dense, torch.randn(8, 16))
    assert not any("moe_routing" in n or "mixture-of-experts" in n for n in plain.notes)


def test_topk_outside_a_router_is_not_routing():
    class TopK(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            values, _ = self.lin(x).topk(2, dim=-1)  # indices never read
            return values

    est = estimate(TopK, torch.randn(8, 16), mode="infer")
    assert not any("mixture-of-experts routing" in n for n in est.notes)


class Gather(nn.Module):
    """An advanced-index gather of a parameter, as MoE layers gather each expert's tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(256, 64))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.table[idx].square().sum()


def test_gather_backward_scatters_into_its_zeros_in_place():
    """``index_backward`` runs ``_index_put_impl_`` into fresh zeros on the GPU; under a dispatch
    mode torch takes the out-of-place ``index_put``, which the trace must not count."""
    workload = make_workload(Gather, torch.randint(0, 256, (512,)), loss_fn=lambda m, b: m(b))
    trace = trace_workload(workload, H200)
    backward = [i for i in trace.infos if i.phase == "step1.backward" and i.shape == (256, 64)]
    assert [i.op for i in backward if i.op.startswith("index_put")] == []
    assert any(i.op == "new_zeros" for i in backward)


def test_float32_grouped_mm_is_allocated_as_cuda_does():
    from memfit.trace._routing import grouped_mm_output

    a = torch.empty(10, 6, device="meta")
    b = torch.empty(4, 6, 5, device="meta")
    offs = torch.empty(4, dtype=torch.int32, device="meta")
    out = grouped_mm_output((a, b, offs), {})
    assert out is not None
    assert out.shape == (10, 5) and out.stride() == (8, 1)  # rows padded to 16 bytes
    grad_b = grouped_mm_output((a.t(), torch.empty(10, 5, device="meta"), offs), {})
    assert grad_b is not None and grad_b.shape == (4, 6, 5) and grad_b.stride() == (48, 8, 1)
    assert grouped_mm_output((a.bfloat16(), b.bfloat16(), offs), {}) is None  # meta kernel's


MODEL_FILE = """
import torch, transformers

def make_model():
    cfg = transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        num_local_experts=4, num_experts_per_tok=2)
    return transformers.MixtralForCausalLM(cfg)

def make_batch(batch_size, seq_len):
    ids = torch.randint(0, 64, (batch_size, seq_len or 32))
    return {"input_ids": ids, "labels": ids}
"""


def test_cli_moe_routing_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "moe_model.py"
    path.write_text(MODEL_FILE)
    target = f"{path}:make_model"
    assert main(["estimate", target, "-b", "2", "-s", "32", "--moe-routing", "skewed"]) == 0
    out = capsys.readouterr().out
    assert "skewed (the worst case)" in " ".join(out.split())
    assert main(["estimate", target, "-b", "2", "-s", "32"]) == 0
    assert "balanced" in capsys.readouterr().out


def test_cli_help_names_the_flag(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "--moe-routing" in capsys.readouterr().out
