"""Mixture-of-experts workloads used while building MoE routing: NOT held out.

Mixtral-style (8 experts, top-2) and Qwen2-MoE-style (60 experts, top-4) training steps, b4 s1024
bf16-mixed, with transformers' default experts code (grouped_mm) and the eager one under each
routing policy. On the GPU the router's choices are replaced by the policy's, so that the
measurement is of the routing the estimate assumes. Run from the repository root:

    PYTHONPATH=src python benchmarks/moe_dev.py estimate mix-grouped
    PYTHONPATH=src python benchmarks/moe_dev.py measure mix-grouped [TRACE.pickle.gz]   # on a GPU

Results (H200, torch 2.11, transformers 5.17, 2026-12-01):
results/2026-12-01-h200-heldout-families/moe-dev/.
"""

import json
import sys
import time

import torch
import transformers

from memfit.workload import make_workload

CASES = {
    "mix-grouped": ("mixtral", None, None),
    "mix-eager-bal": ("mixtral", "eager", "balanced"),
    "mix-eager-skew": ("mixtral", "eager", "skewed"),
    "qwen-grouped": ("qwen", None, None),
    "qwen-eager-bal": ("qwen", "eager", "balanced"),
    "qwen-eager-skew": ("qwen", "eager", "skewed"),
}


def build(kind, impl):
    def make():
        if kind == "mixtral":
            cfg = transformers.MixtralConfig(
                vocab_size=32000,
                hidden_size=1024,
                intermediate_size=3584,
                num_hidden_layers=8,
                num_attention_heads=16,
                num_key_value_heads=8,
                num_local_experts=8,
                num_experts_per_tok=2,
            )
            cls = transformers.MixtralForCausalLM
        else:
            cfg = transformers.Qwen2MoeConfig(
                vocab_size=32000,
                hidden_size=1024,
                intermediate_size=2816,
                moe_intermediate_size=704,
                shared_expert_intermediate_size=2816,
                num_hidden_layers=8,
                num_attention_heads=16,
                num_key_value_heads=16,
                num_experts=60,
                num_experts_per_tok=4,
            )
            cls = transformers.Qwen2MoeForCausalLM
        if impl is not None:
            cfg._experts_implementation = impl
        return cls(cfg)

    return make


def force_routing(kind, policy):
    """On the GPU: replace the router's indices by the policy's (what the estimate assumes)."""
    from memfit.trace._routing import Routing

    mod = (
        transformers.models.mixtral.modeling_mixtral
        if kind == "mixtral"
        else transformers.models.qwen2_moe.modeling_qwen2_moe
    )
    cls = mod.MixtralTopKRouter if kind == "mixtral" else mod.Qwen2MoeTopKRouter
    orig = cls.forward

    def forward(self, hidden_states):
        logits, scores, idx = orig(self, hidden_states)
        forced = Routing(policy).choices(idx.shape[0], self.num_experts, self.top_k).to(idx.device)
        return logits, scores, forced

    cls.forward = forward


def workload(cid, policy_kw=True):
    kind, impl, policy = CASES[cid]
    ids = torch.randint(0, 32000, (4, 1024))
    kw = {"moe_routing": policy} if (policy and policy_kw) else {}
    return make_workload(
        build(kind, impl),
        {"input_ids": ids, "labels": ids},
        precision="bf16-mixed",
        gpu="h200",
        **kw,
    )


if __name__ == "__main__":
    what, cid = sys.argv[1], sys.argv[2]
    if what == "measure":
        from memfit.estimator._measure import measure

        kind, impl, policy = CASES[cid]
        if policy:
            force_routing(kind, policy)
        m, snap = measure(workload(cid, policy_kw=False), record_history=len(sys.argv) > 3)
        if snap is not None:
            import gzip
            import pickle

            for tr in snap.get("device_traces", []):
                for e in tr:
                    e.pop("frames", None)
            for seg in snap.get("segments", []):
                for b in seg.get("blocks", []):
                    b.pop("frames", None)
            with gzip.open(sys.argv[3], "wb") as fh:
                pickle.dump(snap, fh)
        print(
            json.dumps(
                {
                    "id": cid,
                    "tf": transformers.__version__,
                    "torch": torch.__version__,
                    **{k: v for k, v in m.to_dict().items() if isinstance(v, (int, float, str))},
                }
            )
        )
    else:
        from memfit.estimator._estimate import estimate_workload

        t = time.time()
        est = estimate_workload(workload(cid))
        print(
            json.dumps(
                {
                    "id": cid,
                    "tf": transformers.__version__,
                    "alloc": est.peak_allocated,
                    "reserved": est.peak_reserved,
                    "seconds": round(time.time() - t, 1),
                    "notes": est.notes,
                }
            )
        )
