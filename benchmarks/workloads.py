"""The validation set: real workloads that estimates are checked against on a GPU.

Each entry is the arguments of ``memfit estimate`` / ``memfit validate``. Chosen to cover CNNs,
ViTs, encoders, decoders (>= 1B parameters), encoder-decoders, an LSTM; fp32, pure bf16/fp16
and mixed precision; checkpointing; inference; foreach and fused optimizers; expandable segments.
"""

from __future__ import annotations

from typing import Any

WORKLOADS: list[dict[str, Any]] = [
    {"id": "resnet50-fp32-b64", "model": "tv:resnet50", "batch_size": 64},
    {
        "id": "resnet50-bf16mixed-b64",
        "model": "tv:resnet50",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "resnet50-fp16-infer-b128",
        "model": "tv:resnet50",
        "batch_size": 128,
        "precision": "fp16",
        "mode": "infer",
    },
    {
        "id": "convnext_tiny-bf16mixed-b64",
        "model": "timm:convnext_tiny",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {"id": "efficientnet_b0-fp32-b128", "model": "timm:efficientnet_b0", "batch_size": 128},
    {
        "id": "vit_b_16-bf16mixed-b64",
        "model": "tv:vit_b_16",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {"id": "hf-vit-base-fp32-b32", "model": "vit-base-patch16-224", "batch_size": 32},
    {
        "id": "bert-base-fp32-b32-s512",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
    },
    {
        "id": "bert-base-fp32-b32-s512-ckpt",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "checkpointing": True,
    },
    {
        "id": "bert-base-bf16mixed-b32-s512",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16-mixed",
    },
    {
        "id": "roberta-base-fp32-b32-s512-expandable",
        "model": "roberta-base",
        "batch_size": 32,
        "seq_len": 512,
        "allocator_config": "expandable_segments:True",
    },
    {
        "id": "bert-large-fp16-infer-b64-s512",
        "model": "bert-large-uncased",
        "batch_size": 64,
        "seq_len": 512,
        "precision": "fp16",
        "mode": "infer",
    },
    {
        "id": "gpt2-bf16mixed-b16-s1024-fused",
        "model": "gpt2",
        "batch_size": 16,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
    },
    {
        "id": "gpt2-fp32-b8-s1024-sgd",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 1024,
        "optimizer": "sgd",
    },
    {
        "id": "gpt2-medium-fp16mixed-b8-s1024",
        "model": "gpt2-medium",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "fp16-mixed",
    },
    {
        "id": "tinyllama-bf16-b4-s2048",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16",
    },
    {
        "id": "tinyllama-bf16-b4-s2048-expandable",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16",
        "allocator_config": "expandable_segments:True",
    },
    {
        "id": "qwen2.5-0.5b-bf16mixed-b8-s1024-ckpt",
        "model": "qwen2.5-0.5b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
    },
    {
        "id": "llama-2-7b-bf16-b1-s4096",
        "model": "llama-2-7b-hf",
        "batch_size": 1,
        "seq_len": 4096,
        "precision": "bf16",
    },
    {
        "id": "llama-2-7b-bf16-infer-b8-s2048",
        "model": "llama-2-7b-hf",
        "batch_size": 8,
        "seq_len": 2048,
        "precision": "bf16",
        "mode": "infer",
    },
    {"id": "t5-small-fp32-b32-s512", "model": "t5-small", "batch_size": 32, "seq_len": 512},
    {
        "id": "t5-base-bf16mixed-b16-s512",
        "model": "t5-base",
        "batch_size": 16,
        "seq_len": 512,
        "precision": "bf16-mixed",
    },
    {
        "id": "lstm-lm-fp32-b64-s256",
        "model": "benchmarks/models/lstm_lm.py:make_model",
        "batch_size": 64,
        "seq_len": 256,
        "optimizer": "adam",
    },
]


# Held out: added after the trace rules were fitted to the set above, measured once, never tuned on.
HELD_OUT: list[dict[str, Any]] = [
    {"id": "qwen2.5-0.5b-fp32-b4-s1024", "model": "qwen2.5-0.5b", "batch_size": 4, "seq_len": 1024},
    {
        "id": "gpt2-large-bf16mixed-b4-s1024-ckpt",
        "model": "gpt2-large",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
    },
    {
        "id": "convnext_tiny-fp32-infer-b64",
        "model": "timm:convnext_tiny",
        "batch_size": 64,
        "mode": "infer",
    },
    {
        "id": "roberta-base-fp16mixed-b16-s256",
        "model": "roberta-base",
        "batch_size": 16,
        "seq_len": 256,
        "precision": "fp16-mixed",
    },
    {
        "id": "resnet50-bf16-b32-sgd",
        "model": "tv:resnet50",
        "batch_size": 32,
        "precision": "bf16",
        "optimizer": "sgd",
    },
    {
        "id": "mistral-7b-bf16-infer-b2-s4096",
        "model": "mistral-7b-v0.1",
        "batch_size": 2,
        "seq_len": 4096,
        "precision": "bf16",
        "mode": "infer",
    },
    {
        "id": "t5-small-bf16mixed-b16-s512-adamw-fused",
        "model": "t5-small",
        "batch_size": 16,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
    },
    # inference through cuDNN's fused attention (no log-sum-exp), predicted
    # (benchmarks/predict.py) before they were measured
    {
        "id": "tinyllama-bf16-infer-b16-s2048",
        "model": "tinyllama-1.1b",
        "batch_size": 16,
        "seq_len": 2048,
        "precision": "bf16",
        "mode": "infer",
    },
    {
        "id": "gpt2-medium-fp16-infer-b32-s1024",
        "model": "gpt2-medium",
        "batch_size": 32,
        "seq_len": 1024,
        "precision": "fp16",
        "mode": "infer",
    },
    {
        "id": "qwen2.5-0.5b-bf16-infer-b16-s2048",
        "model": "qwen2.5-0.5b",
        "batch_size": 16,
        "seq_len": 2048,
        "precision": "bf16",
        "mode": "infer",
    },
    # padded batches (a boolean mask through cuDNN's attention), predicted before
    # they were measured; every row but the first is padded from "pad_from" on
    {
        "id": "tinyllama-bf16-b4-s2048-padded",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16",
        "pad_from": 1536,
    },
    {
        "id": "bert-base-bf16mixed-b32-s512-padded",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "pad_from": 384,
    },
    {
        "id": "qwen2.5-0.5b-bf16-infer-b16-s2048-padded",
        "model": "qwen2.5-0.5b",
        "batch_size": 16,
        "seq_len": 2048,
        "precision": "bf16",
        "mode": "infer",
        "pad_from": 1024,
    },
    {
        "id": "vit_b_16-fp32-b32-expandable",
        "model": "tv:vit_b_16",
        "batch_size": 32,
        "allocator_config": "expandable_segments:True",
    },
]


def recipe_for(entry: dict[str, Any]) -> Any:
    """The entry's model recipe; with ``pad_from``, its text batches padded from that token
    on in every row but the first (attention mask 0 there), as a batch of varied lengths is."""
    import dataclasses

    from memfit.workload._models import resolve_model

    recipe = resolve_model(entry["model"])
    pad_from = entry.get("pad_from")
    if pad_from is None or recipe.make_batch is None:
        return recipe
    make = recipe.make_batch

    def padded(batch_size: int, seq_len: int | None) -> Any:
        batch = make(batch_size, seq_len)
        batch["attention_mask"][1:, pad_from:] = 0
        return batch

    return dataclasses.replace(recipe, make_batch=padded)


def estimate_entry(entry: dict[str, Any]) -> Any:
    """memfit's estimate of one entry for an H200 (on the CPU; no GPU is touched)."""
    from memfit._gpus import resolve_gpu
    from memfit.estimator._estimate import estimate_workload
    from memfit.workload import make_workload

    recipe = recipe_for(entry)
    return estimate_workload(
        make_workload(
            recipe,
            allocator_config=entry.get("allocator_config", ""),
            gpu=resolve_gpu("h200"),
            **estimate_kwargs(entry),
        )
    )


def estimate_kwargs(entry: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of memfit's workload builder for one entry."""
    kwargs = {
        "batch_size": entry["batch_size"],
        "seq_len": entry.get("seq_len"),
        "precision": entry.get("precision", "fp32"),
        "mode": entry.get("mode", "train"),
    }
    if kwargs["mode"] == "train":  # inference takes neither (memfit refuses them there)
        kwargs["optimizer"] = entry.get("optimizer", "adamw")
        kwargs["activation_checkpointing"] = entry.get("checkpointing", False)
        kwargs["accumulation"] = entry.get("accumulation", 1)
    if "activation_memory_budget" in entry:  # a compiled model's (HELD_OUT_BUDGET)
        kwargs["activation_memory_budget"] = entry["activation_memory_budget"]
    if "offload" in entry:  # activation offload's share of the blocks (HELD_OUT_OFFLOAD)
        kwargs["offload"] = entry["offload"]
    if "offload_checkpoints" in entry:  # the checkpointed blocks' inputs offloaded
        kwargs["offload_checkpoints"] = entry["offload_checkpoints"]
    if "batch_held" in entry:  # the caller's batch held through the step
        kwargs["batch_held"] = entry["batch_held"]
    if "techniques" in entry:  # memfit.technique's, by name (HELD_OUT_HOST_OPTIMIZER)
        kwargs["techniques"] = entry["techniques"]
    if "strategy" in entry:  # a data-parallel rank's (HELD_OUT_DDP)
        kwargs["strategy"] = entry["strategy"]
        kwargs["world_size"] = entry.get("world_size", 1)
    return kwargs


# Held out: families memfit had never been checked on, predicted with predict.py and committed
# before gpu_measure.py measured them (results/2026-12-01-h200-heldout-families/heldout/).
HELD_OUT_FAMILIES: list[dict[str, Any]] = [
    {
        "id": "vit_small-bf16mixed-b128",
        "model": "timm:vit_small_patch16_224",
        "batch_size": 128,
        "precision": "bf16-mixed",
    },
    {
        "id": "clip-vit-b32-bf16mixed-b128",
        "model": "benchmarks/models/clip_vit_b32.py:make_model",
        "batch_size": 128,
        "precision": "bf16-mixed",
    },
    {
        "id": "efficientnet_v2_s-fp16mixed-b64",
        "model": "tv:efficientnet_v2_s",
        "batch_size": 64,
        "precision": "fp16-mixed",
    },
    {
        "id": "whisper-small-fp32-b16-s128",
        "model": "benchmarks/models/whisper_small.py:make_model",
        "batch_size": 16,
        "seq_len": 128,
    },
    {
        "id": "resnet50-channels-last-bf16mixed-b64",
        "model": "benchmarks/models/resnet50_channels_last.py:make_model",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "lstm-lm-bf16mixed-b32-s512",
        "model": "benchmarks/models/lstm_lm.py:make_model",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16-mixed",
    },
    {
        "id": "resnet50-fp16-infer-b256",
        "model": "tv:resnet50",
        "batch_size": 256,
        "precision": "fp16",
        "mode": "infer",
    },
    {
        "id": "tinyllama-bf16-b1-s8192-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 1,
        "seq_len": 8192,
        "precision": "bf16",
        "checkpointing": True,
    },
    {
        "id": "tinyllama-bf16mixed-b1-s8192-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 1,
        "seq_len": 8192,
        "precision": "bf16-mixed",
        "checkpointing": True,
    },
    {
        "id": "lora-tinyllama-bf16-b4-s1024",
        "model": "benchmarks/models/lora_llama.py:make_model",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16",
    },
]

# Held out: steps only a step function (or MoE routing, or a model that computes while it is
# built) can express; predicted and committed before they were measured.
HELD_OUT_USER_STEPS: list[dict[str, Any]] = [
    {
        "id": "gpt2-accumulate4-bf16autocast-b32-s1024",
        "model": "benchmarks/models/gpt2_accumulate.py:make_model",
        "batch_size": 32,
        "seq_len": 1024,
    },
    {
        "id": "tinyllama-generate-greedy-bf16-b8-p1024-n256",
        "model": "benchmarks/models/generate_llama.py:make_model",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16",
        "mode": "infer",
    },
    {
        "id": "qwen2.5-0.5b-generate-sample-bf16-b32-p512-n128",
        "model": "benchmarks/models/generate_qwen_sampling.py:make_model",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16",
        "mode": "infer",
    },
    {
        "id": "gpt2-medium-generate-static-bf16-b16-p512-n256",
        "model": "benchmarks/models/generate_gpt2_static.py:make_model",
        "batch_size": 16,
        "seq_len": 512,
        "precision": "bf16",
        "mode": "infer",
    },
    {
        "id": "qwen-moe-bf16-infer-b8-s2048",
        "model": "benchmarks/models/qwen_moe.py:make_model",
        "batch_size": 8,
        "seq_len": 2048,
        "precision": "bf16",
        "mode": "infer",
    },
    {"id": "regnet_y_8gf-fp32-b32", "model": "tv:regnet_y_8gf", "batch_size": 32},
]

# Compiled steps: predicted before they were measured (results/2026-12-01-h200-user-steps-compiled/)
HELD_OUT_COMPILED: list[dict[str, Any]] = [
    {
        "id": "llama-0.6b-compiled-bf16mixed-b4-s1024",
        "model": "benchmarks/models/compiled_llama.py:make_model",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
    {
        "id": "bert-base-compiled-fp32-b32-s512",
        "model": "benchmarks/models/compiled_bert.py:make_model",
        "batch_size": 32,
        "seq_len": 512,
    },
    {
        "id": "gpt2-medium-compiled-infer-bf16-b16-s1024",
        "model": "benchmarks/models/compiled_gpt2_infer.py:make_model",
        "batch_size": 16,
        "seq_len": 1024,
        "precision": "bf16",
        "mode": "infer",
    },
]

# Held out: memfit's own gradient accumulation and selective checkpointing (new then),
# predicted before measuring (results/2026-12-01-h200-compiled-accumulation-step-times/); the
# step function of the same shape as the first is gpt2-accumulate4-...
HELD_OUT_ACCUMULATION: list[dict[str, Any]] = [
    {
        "id": "gpt2-bf16mixed-b8x4-s1024-accumulation",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "accumulation": 4,
    },
    {
        "id": "tinyllama-bf16mixed-b4-s2048-selective",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16-mixed",
        "checkpointing": "selective",
    },
    {
        "id": "bert-base-bf16mixed-b32-s512-selective",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "checkpointing": "selective",
    },
    {
        "id": "tinyllama-bf16-b2x3-s2048-ckpt-accumulation",
        "model": "tinyllama-1.1b",
        "batch_size": 2,
        "seq_len": 2048,
        "precision": "bf16",
        "checkpointing": True,
        "accumulation": 3,
    },
]

# Held out: compiled families not seen while the compiled trace was built (a timm
# ViT, a convolutional network, a Qwen-style LLM's inference), predicted before measuring
HELD_OUT_COMPILED_FAMILIES: list[dict[str, Any]] = [
    {
        "id": "vit-s16-compiled-bf16mixed-b64",
        "model": "benchmarks/models/compiled_vit.py:make_model",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "resnet50-compiled-bf16mixed-b64",
        "model": "benchmarks/models/compiled_resnet.py:make_model",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "qwen2.5-0.5b-compiled-infer-bf16-b8-s1024",
        "model": "benchmarks/models/compiled_qwen_infer.py:make_model",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16",
        "mode": "infer",
    },
]

# Not held out: the compiled GPT-2 step the compiled trace was developed against
# (benchmarks/compiled_truth.py measured it first, results/2026-12-01-h200-user-steps-compiled/)
COMPILED_DEV: list[dict[str, Any]] = [
    {
        "id": "gpt2-compiled-bf16mixed-b8-s1024",
        "model": "benchmarks/models/compiled_gpt2.py:make_model",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
]

# Not held out: measured while MoE routing was built (benchmarks/moe_dev.py, "mix-grouped")
MOE_DEV: list[dict[str, Any]] = [
    {
        "id": "mixtral-moe-bf16mixed-b4-s1024",
        "model": "benchmarks/models/mixtral_moe.py:make_model",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
]

# Held out: the optimizer stepped in backward, predicted with
# predict.py (torch 2.11, transformers 5.17, as on the GPU host) before gpu_measure.py ran them.
HELD_OUT_IN_BACKWARD: list[dict[str, Any]] = [
    {
        "id": "tinyllama-bf16-b1-s1024-inbw",
        "model": "tinyllama-1.1b",
        "batch_size": 1,
        "seq_len": 1024,
        "precision": "bf16",
        "optimizer": "adamw-in-backward",
    },
    {
        "id": "tinyllama-bf16-b1-s1024-fused",
        "model": "tinyllama-1.1b",
        "batch_size": 1,
        "seq_len": 1024,
        "precision": "bf16",
        "optimizer": "adamw-fused",
    },
    {
        "id": "qwen-bf16mixed-b4-s512-ckpt-inbw",
        "model": "qwen2.5-0.5b",
        "batch_size": 4,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "checkpointing": True,
        "optimizer": "adamw-in-backward",
    },
    {
        "id": "gpt2-fp32-b8-s512-inbw",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 512,
        "optimizer": "adamw-in-backward",
    },
    {
        "id": "bert-base-bf16mixed-b32-s512-inbw",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "optimizer": "adamw-in-backward",
    },
    {
        "id": "gpt2-fp32-b8-s512-sgd-fused",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 512,
        "optimizer": "sgd-fused",
    },
    {
        "id": "resnet50-bf16mixed-b64-inbw-expandable",
        "model": "tv:resnet50",
        "batch_size": 64,
        "precision": "bf16-mixed",
        "optimizer": "sgd-in-backward",
        "allocator_config": "expandable_segments:True",
    },
]

# Held out: 8-bit optimizer states (bitsandbytes 0.50.2, carried to the
# GPU host as a wheel), predicted with predict.py before gpu_measure.py ran them.
HELD_OUT_EIGHT_BIT: list[dict[str, Any]] = [
    {
        "id": "gpt2-fp32-b8-s512-8bit",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 512,
        "optimizer": "adamw-8bit",
    },
    {
        "id": "tinyllama-bf16mixed-b8-s1024-ckpt-8bit",
        "model": "tinyllama-1.1b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
        "optimizer": "adamw-8bit",
    },
    {
        "id": "bert-base-bf16mixed-b32-s512-8bit",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "optimizer": "adam-8bit",
    },
    {
        "id": "llama-2-7b-bf16-b1-s512-8bit",
        "model": "llama-2-7b-hf",
        "batch_size": 1,
        "seq_len": 512,
        "precision": "bf16",
        "optimizer": "adamw-8bit",
    },
]

# Held out: compiled steps under torch.compile's activation memory
# budget (the partitioner recomputes to save at most that share), predicted with predict.py
# before gpu_measure.py ran them; at budget 1.0 they are COMPILED_DEV's and HELD_OUT_FAMILIES's rows
HELD_OUT_BUDGET: list[dict[str, Any]] = [
    *(
        {
            "id": f"gpt2-compiled-bf16mixed-b8-s1024-budget{budget:g}",
            "model": "benchmarks/models/compiled_gpt2.py:make_model",
            "batch_size": 8,
            "seq_len": 1024,
            "precision": "bf16-mixed",
            "activation_memory_budget": budget,
        }
        for budget in (0.5, 0.2, 0.0)
    ),
    {
        "id": "llama-0.6b-compiled-bf16mixed-b4-s1024-budget0.5",
        "model": "benchmarks/models/compiled_llama.py:make_model",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "activation_memory_budget": 0.5,
    },
    {
        "id": "vit-s16-compiled-bf16mixed-b64-budget0.3",
        "model": "benchmarks/models/compiled_vit.py:make_model",
        "batch_size": 64,
        "precision": "bf16-mixed",
        "activation_memory_budget": 0.3,
    },
]

# Held out for activation offload: each predicted before the GPU ran it
HELD_OUT_OFFLOAD: list[dict[str, Any]] = [
    *(
        {
            "id": f"bert-base-fp32-b32-s512-offload{share:g}",
            "model": "bert-base-uncased",
            "batch_size": 32,
            "seq_len": 512,
            "offload": share,
        }
        for share in (1.0, 0.5)
    ),
    {
        "id": "bert-base-fp32-b32-s512-ckpt0.5-offload1",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "checkpointing": 0.5,
        "offload": 1.0,
    },
    *(
        {
            "id": f"gpt2-bf16mixed-b8-s1024-offload{share:g}",
            "model": "gpt2",
            "batch_size": 8,
            "seq_len": 1024,
            "precision": "bf16-mixed",
            "offload": share,
        }
        for share in (1.0, 0.5)
    ),
    {
        "id": "tinyllama-bf16mixed-b4-s2048-offload1",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16-mixed",
        "offload": 1.0,
    },
    {
        "id": "resnet50-fp32-b64-offload1",
        "model": "tv:resnet50",
        "batch_size": 64,
        "offload": 1.0,
    },
    {
        "id": "vit-b16-bf16mixed-b64-offload0.5",
        "model": "timm:vit_base_patch16_224",
        "batch_size": 64,
        "precision": "bf16-mixed",
        "offload": 0.5,
    },
]

# the second set, predicted after the fix of the trace's prefetch
HELD_OUT_OFFLOAD_2: list[dict[str, Any]] = [
    {
        "id": "bert-large-fp32-b16-s512-offload0.5",
        "model": "bert-large-uncased",
        "batch_size": 16,
        "seq_len": 512,
        "offload": 0.5,
    },
    {
        "id": "gpt2-medium-bf16mixed-b8-s1024-ckpt0.5-offload1",
        "model": "gpt2-medium",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": 0.5,
        "offload": 1.0,
    },
    {
        "id": "qwen2.5-0.5b-bf16mixed-b4-s2048-offload0.5-accum2",
        "model": "qwen2.5-0.5b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16-mixed",
        "accumulation": 2,
        "offload": 0.5,
    },
    {
        "id": "convnext-tiny-bf16mixed-b64-offload1",
        "model": "timm:convnext_tiny",
        "batch_size": 64,
        "precision": "bf16-mixed",
        "offload": 1.0,
    },
]

# Checkpointed blocks' inputs offloaded, measured through memfit.apply first
# (offload_apply.py); this one's reserved was low in memfit's own loop too: align.py's subject
ALIGN_OFFLOADED_INPUTS: list[dict[str, Any]] = [
    {
        "id": "vit-b16-bf16mixed-b128-ckpt-offloadckpt",
        "model": "timm:vit_base_patch16_224",
        "batch_size": 128,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
        "checkpointing": True,
        "offload_checkpoints": True,
    },
]

# The step memfit.apply returns, given ResNet-50's whole batch on the GPU
# (``apply_trace.py`` records it; ``batch_held`` counts the batch the caller holds)
ALIGN_HELD_BATCH: list[dict[str, Any]] = [
    {
        "id": "resnet50-bf16mixed-b64x2-ckpt-offloadckpt-held",
        "model": "tv:resnet50",
        "batch_size": 64,
        "accumulation": 2,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
        "checkpointing": True,
        "offload_checkpoints": True,
        "batch_held": True,
    },
]

# Held out after the trace's convolution-layout changes: convolutions whose output is read back
# through a permute or transpose (their gradients' layout), a batch held through accumulated
# steps
HELD_OUT_VISION_LAYOUTS: list[dict[str, Any]] = [
    {
        "id": "swin-t-bf16mixed-b64",
        "model": "timm:swin_tiny_patch4_window7_224",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "deit-s-bf16mixed-b128-ckpt",
        "model": "timm:deit_small_patch16_224",
        "batch_size": 128,
        "precision": "bf16-mixed",
        "checkpointing": True,
    },
    {
        "id": "tv-swin-t-fp32-b32",
        "model": "tv:swin_t",
        "batch_size": 32,
    },
    {
        "id": "beit-b-bf16mixed-b64-x2-held",
        "model": "timm:beit_base_patch16_224",
        "batch_size": 64,
        "accumulation": 2,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
        "batch_held": True,
    },
    {
        "id": "vit-b16-fp32-b32-x4-held",
        "model": "timm:vit_base_patch16_224",
        "batch_size": 32,
        "accumulation": 4,
        "batch_held": True,
    },
]

# Two plans whose applied steps (a new batch moved to the GPU before each step)
# peaked above the plan; ``plan_proof.py measure --history`` records them for align.py
ALIGN_APPLIED_PLANS: list[dict[str, Any]] = [
    {  # ALIGN_HELD_BATCH's step under the plan's allocator setting
        **ALIGN_HELD_BATCH[0],
        "id": "resnet50-plan-2560MiB",
        "allocator_config": "expandable_segments:True",
    },
    {
        "id": "vit-b16-plan-4GiB",
        "model": "timm:vit_base_patch16_224",
        "batch_size": 128,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
        "checkpointing": True,
        "batch_held": True,
        "allocator_config": "expandable_segments:True",
    },
]

# Qwen2.5-0.5B 8 x 1 fully checkpointed, which plan_versus ran under the 16 GiB cap
# at 15.5e9 bytes reserved (expandable segments) where memfit estimated 16.7e9; with and
# without expandable segments, and two more checkpointed text steps held out beside it
_QWEN_CKPT: dict[str, Any] = {
    "id": "qwen05-bf16mixed-b8-s512-ckpt",
    "model": "qwen2.5-0.5b",
    "batch_size": 8,
    "seq_len": 512,
    "precision": "bf16-mixed",
    "optimizer": "adamw-fused",
    "checkpointing": True,
}
ALIGN_CACHE_FREE: list[dict[str, Any]] = [
    {
        **_QWEN_CKPT,
        "id": "qwen05-bf16mixed-b8-s512-ckpt-expandable",
        "allocator_config": "expandable_segments:True",
    },
    _QWEN_CKPT,
    {  # the plan for 12 GiB of 2026-12-03: memfit's loop peaked 3.2% above it
        "id": "qwen05-plan-12GiB",
        "model": "qwen2.5-0.5b",
        "batch_size": 2,
        "seq_len": 512,
        "accumulation": 4,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
        "offload": 1.0,
        "batch_held": True,
    },
]
HELD_OUT_EXPANDABLE_CKPT: list[dict[str, Any]] = [
    {
        "id": "tinyllama-bf16mixed-b4-s1024-ckpt-expandable",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "optimizer": "adamw-fused",
        "checkpointing": True,
        "allocator_config": "expandable_segments:True",
    },
    {
        "id": "gpt2-bf16mixed-b16-s1024-ckpt-expandable",
        "model": "gpt2",
        "batch_size": 16,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
        "allocator_config": "expandable_segments:True",
    },
]

# Held out: one DDP rank on one GPU (NCCL, a world of one), its
# gradient buckets and their rebuild after the first backward
HELD_OUT_DDP: list[dict[str, Any]] = [
    {
        "id": "ddp1-gpt2-bf16mixed-b8-s1024",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "strategy": "ddp",
    },
    {
        "id": "ddp1-bert-base-fp32-b32-s512",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "strategy": "ddp",
    },
    {
        "id": "ddp1-tinyllama-bf16mixed-b4-s1024-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
        "strategy": "ddp",
    },
]


# Held out: rank 0 of an FSDP2 job. A world of one runs NCCL; larger
# worlds run on one GPU with PyTorch's fake process group answering the collectives
# (``gpu_measure.py``): the allocator sees what rank 0 allocates, NCCL's own memory aside.
HELD_OUT_FSDP2: list[dict[str, Any]] = [
    {"id": "fsdp2-1-gpt2-fp32-b4-s512", "model": "gpt2", "batch_size": 4, "seq_len": 512},
    {
        "id": "fsdp2-4-gpt2-fp32-b4-s512",
        "model": "gpt2",
        "batch_size": 4,
        "seq_len": 512,
        "world_size": 4,
    },
    {
        "id": "fsdp2-8-gpt2-bf16mixed-b8-s1024",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "world_size": 8,
    },
    {
        "id": "fsdp2-2-bert-base-fp32-b32-s512",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "world_size": 2,
    },
    {
        "id": "fsdp2-4-tinyllama-bf16-b4-s2048-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16",
        "checkpointing": True,
        "world_size": 4,
    },
    {
        "id": "fsdp2-8-tinyllama-bf16mixed-b2-s2048",
        "model": "tinyllama-1.1b",
        "batch_size": 2,
        "seq_len": 2048,
        "precision": "bf16-mixed",
        "world_size": 8,
    },
    {"id": "fsdp2-2-resnet50-fp32-b64", "model": "tv:resnet50", "batch_size": 64, "world_size": 2},
    {
        "id": "fsdp2-1-tinyllama-bf16mixed-b4-s1024-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
    },
]
for _entry in HELD_OUT_FSDP2:
    _entry["strategy"] = "fsdp2"


# Held out (second set): FSDP2's mixed precision as torchtitan sets it
# (bf16 all-gathers, float32 reduce-scatters, no autocast), memfit's meaning of bf16-mixed under
# FSDP2 since the first set (which ran autocast) was measured; rank 0 as above
HELD_OUT_FSDP2_MP: list[dict[str, Any]] = [
    {
        "id": "fsdp2mp-8-tinyllama-bf16mixed-b2-s2048",
        "model": "tinyllama-1.1b",
        "batch_size": 2,
        "seq_len": 2048,
        "precision": "bf16-mixed",
        "world_size": 8,
    },
    {
        "id": "fsdp2mp-4-gpt2-bf16mixed-b8-s1024",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "world_size": 4,
    },
    {
        "id": "fsdp2mp-1-tinyllama-bf16mixed-b4-s2048-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16-mixed",
        "checkpointing": True,
    },
    {
        "id": "fsdp2-4-bert-large-fp32-b16-s512",
        "model": "bert-large-uncased",
        "batch_size": 16,
        "seq_len": 512,
        "world_size": 4,
    },
    {
        "id": "fsdp2mp-16-tinyllama-bf16mixed-b8-s1024-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
        "world_size": 16,
    },
]
for _entry in HELD_OUT_FSDP2_MP:
    _entry["strategy"] = "fsdp2"

# Held out: DeepSpeed ZeRO-1/2/3 (DeepSpeed 0.19.8 carried to the GPU
# host, built with DS_BUILD_OPS=0); rank 0 of the job, with world_size > 1 answered by a fake
# process group as for FSDP2. Predicted (benchmarks/predict.py, torch 2.11, transformers 5.17)
# and committed before the first measurement.
HELD_OUT_ZERO: list[dict[str, Any]] = [
    {"id": "zero1-1-gpt2-fp32-b4-s512", "model": "gpt2", "batch_size": 4, "seq_len": 512},
    {
        "id": "zero1-4-gpt2-fp32-b4-s512",
        "model": "gpt2",
        "batch_size": 4,
        "seq_len": 512,
        "world_size": 4,
    },
    {
        "id": "zero2-4-gpt2-fp32-b4-s512",
        "model": "gpt2",
        "batch_size": 4,
        "seq_len": 512,
        "world_size": 4,
    },
    {
        "id": "zero3-4-gpt2-fp32-b4-s512",
        "model": "gpt2",
        "batch_size": 4,
        "seq_len": 512,
        "world_size": 4,
    },
    {
        "id": "zero2-8-gpt2-bf16mixed-b8-s1024",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "world_size": 8,
    },
    {
        "id": "zero3-2-bert-base-fp32-b32-s512",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "world_size": 2,
    },
    {
        "id": "zero3-8-tinyllama-bf16mixed-b2-s2048-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 2,
        "seq_len": 2048,
        "precision": "bf16-mixed",
        "checkpointing": True,
        "world_size": 8,
    },
]
for _entry in HELD_OUT_ZERO:
    _entry["strategy"] = _entry["id"].split("-")[0]

# Held out (second set): predicted after the two fixes the first set's
# measurement led to (DeepSpeed's meta shape tensors kept out of the trace; its streams stood
# in for, as FSDP2's), before these were measured: other models, stages and world sizes.
HELD_OUT_ZERO_2: list[dict[str, Any]] = [
    {
        "id": "zero3-8-qwen0.5b-bf16mixed-b4-s1024",
        "model": "qwen2.5-0.5b",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "world_size": 8,
    },
    {
        "id": "zero2-2-gpt2medium-fp32-b8-s512",
        "model": "gpt2-medium",
        "batch_size": 8,
        "seq_len": 512,
        "world_size": 2,
    },
    {
        "id": "zero3-16-bertlarge-bf16mixed-b16-s512-ckpt",
        "model": "bert-large-uncased",
        "batch_size": 16,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "checkpointing": True,
        "world_size": 16,
    },
    {
        "id": "zero1-8-roberta-fp32-b32-s256",
        "model": "roberta-base",
        "batch_size": 32,
        "seq_len": 256,
        "world_size": 8,
    },
]
for _entry in HELD_OUT_ZERO_2:
    _entry["strategy"] = _entry["id"].split("-")[0]

# the DDP step whose GPU peak was a gradients' size above its estimate (2026-12-02), again with
# its allocator trace
DDP_GAP = [
    {
        "id": "ddp1-gpt2-fp32-b4-s512",
        "model": "gpt2",
        "batch_size": 4,
        "seq_len": 512,
        "strategy": "ddp",
    },
]

# Held out for two trace fixes, predicted before they ran: an output layer tied to
# the embedding gets its two gradients summed out of place in float32 (the output layer's is a
# view), and SDPA's math kernel (float32 grouped-query attention) allocates in torch 2.11's
# order. Fitted on Qwen2.5-0.5B's 12 GiB fp32 plan only (2 x 4, 75% checkpointed, for-loop
# AdamW; -5.09% reserved before, exact after)
_QWEN_FP32: dict[str, Any] = {
    "model": "qwen2.5-0.5b",
    "batch_size": 2,
    "seq_len": 512,
    "accumulation": 4,
}
HELD_OUT_TIED_HEAD: list[dict[str, Any]] = [
    {**_QWEN_FP32, "id": "qwen05-fp32-b2x4-s512-ckpt", "checkpointing": True},
    {
        **_QWEN_FP32,
        "id": "qwen05-fp32-b2x4-s512-ckpt-fused",
        "checkpointing": True,
        "optimizer": "adamw-fused",
    },
    {**_QWEN_FP32, "id": "qwen05-fp32-b2x4-s512"},
    {
        **_QWEN_FP32,
        "id": "qwen05-fp32-b1x8-s512-fused",
        "batch_size": 1,
        "accumulation": 8,
        "optimizer": "adamw-fused",
    },
    {"id": "gpt2-fp32-b8-s1024-adamw", "model": "gpt2", "batch_size": 8, "seq_len": 1024},
    {
        "id": "tinyllama-fp32-b2-s1024-ckpt",
        "model": "tinyllama-1.1b",
        "batch_size": 2,
        "seq_len": 1024,
        "checkpointing": True,
    },
]


# Held out: models written by hand as users write them (no zoo), with unusual ops among them:
# FFTs, scatter and index ops, sampling grids, unfold, hand-written attention, packed
# sequences; predicted with predict.py and committed before gpu_measure.py measured them.
HELD_OUT_HANDWRITTEN: list[dict[str, Any]] = [
    {"id": "hw-fno2d-fp32-b32", "model": "benchmarks/models/fno2d.py:make_model", "batch_size": 32},
    {
        "id": "hw-gnn-message-passing-fp32-b64",
        "model": "benchmarks/models/gnn_message_passing.py:make_model",
        "batch_size": 64,
    },
    {
        "id": "hw-spatial-transformer-bf16mixed-b256",
        "model": "benchmarks/models/spatial_transformer.py:make_model",
        "batch_size": 256,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw-unfold-vit-bf16mixed-b128",
        "model": "benchmarks/models/unfold_vit.py:make_model",
        "batch_size": 128,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw-attention-lm-bf16mixed-b16-s1024",
        "model": "benchmarks/models/handwritten_attention_lm.py:make_model",
        "batch_size": 16,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw-packed-gru-fp32-b64-s512",
        "model": "benchmarks/models/packed_gru.py:make_model",
        "batch_size": 64,
        "seq_len": 512,
    },
    {
        "id": "hw-edgeconv-knn-fp32-b32",
        "model": "benchmarks/models/edgeconv_knn.py:make_model",
        "batch_size": 32,
    },
    {
        "id": "hw-vq-vae-fp32-b256",
        "model": "benchmarks/models/vq_vae.py:make_model",
        "batch_size": 256,
    },
    {
        "id": "hw-embedding-bag-recommender-fp32-b32768",
        "model": "benchmarks/models/embedding_bag_recommender.py:make_model",
        "batch_size": 32768,
    },
    {
        "id": "hw-stft-audio-fp32-b256",
        "model": "benchmarks/models/stft_audio_classifier.py:make_model",
        "batch_size": 256,
    },
]


# Held out, a second set of models written by hand (no zoo), with other ops than the first:
# GroupNorm and nearest upsampling, weight-normed dilated causal convolutions, per-point
# convolutions and bmm transforms, capacity-routed experts by one_hot and einsum, field
# embeddings with einsum interactions, byte convolutions, shifted windows by roll, a
# reparameterised latent, depthwise convolutions in channels-last, nn.MultiheadAttention with
# a padding mask; predicted with predict.py and committed before gpu_measure.py measured them.
HELD_OUT_HANDWRITTEN_SECOND: list[dict[str, Any]] = [
    {
        "id": "hw2-unet-denoiser-bf16mixed-b32",
        "model": "benchmarks/models/unet_denoiser.py:make_model",
        "batch_size": 32,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw2-tcn-fp32-b16-s4096",
        "model": "benchmarks/models/tcn.py:make_model",
        "batch_size": 16,
        "seq_len": 4096,
    },
    {
        "id": "hw2-pointnet-fp32-b32",
        "model": "benchmarks/models/pointnet.py:make_model",
        "batch_size": 32,
    },
    {
        "id": "hw2-moe-lm-bf16mixed-b8-s1024",
        "model": "benchmarks/models/moe_lm.py:make_model",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw2-deepfm-cross-fp32-b16384",
        "model": "benchmarks/models/deepfm_cross.py:make_model",
        "batch_size": 16384,
    },
    {
        "id": "hw2-char-cnn-fp16mixed-b256-s2048",
        "model": "benchmarks/models/char_cnn.py:make_model",
        "batch_size": 256,
        "seq_len": 2048,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw2-swin-window-bf16mixed-b64",
        "model": "benchmarks/models/swin_window.py:make_model",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw2-conditional-vae-fp32-b8192",
        "model": "benchmarks/models/conditional_vae.py:make_model",
        "batch_size": 8192,
    },
    {
        "id": "hw2-mobilenet-se-bf16mixed-b128",
        "model": "benchmarks/models/mobilenet_se.py:make_model",
        "batch_size": 128,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw2-mha-classifier-fp16mixed-b32-s512",
        "model": "benchmarks/models/mha_classifier.py:make_model",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "fp16-mixed",
    },
]

# Held out, a third set of models written by hand (no zoo), with other ops than the first two:
# cross-attention to learned latents, a chunked selective scan (cumsum, segment sums, a loop
# over chunks), capsule routing iterations, affine couplings with log-determinants, a 2N x 2N
# contrastive similarity, B-spline bases from comparisons, an edge softmax by scatter_reduce,
# factorised 3-d convolutions, depthwise 1-d convolutions with CTC, Gumbel-sampled rankings by
# argsort and logcumsumexp; predicted with predict.py and committed before gpu_measure.py
# measures them.
HELD_OUT_HANDWRITTEN_THIRD: list[dict[str, Any]] = [
    {
        "id": "hw3-perceiver-bf16mixed-b128",
        "model": "benchmarks/models/perceiver.py:make_model",
        "batch_size": 128,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw3-selective-scan-lm-bf16mixed-b8-s2048",
        "model": "benchmarks/models/selective_scan_lm.py:make_model",
        "batch_size": 8,
        "seq_len": 2048,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw3-capsule-net-fp32-b1024",
        "model": "benchmarks/models/capsule_net.py:make_model",
        "batch_size": 1024,
    },
    {
        "id": "hw3-realnvp-flow-fp32-b256",
        "model": "benchmarks/models/realnvp_flow.py:make_model",
        "batch_size": 256,
    },
    {
        "id": "hw3-simclr-fp16mixed-b4096",
        "model": "benchmarks/models/simclr.py:make_model",
        "batch_size": 4096,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw3-kan-fp32-b16384",
        "model": "benchmarks/models/kan.py:make_model",
        "batch_size": 16384,
    },
    {
        "id": "hw3-graph-attention-fp32-b64",
        "model": "benchmarks/models/graph_attention.py:make_model",
        "batch_size": 64,
    },
    {
        "id": "hw3-r2plus1d-video-fp16mixed-b128",
        "model": "benchmarks/models/r2plus1d_video.py:make_model",
        "batch_size": 128,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw3-ctc-speech-bf16mixed-b64-s3200",
        "model": "benchmarks/models/ctc_speech.py:make_model",
        "batch_size": 64,
        "seq_len": 3200,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw3-plackett-luce-ranker-bf16mixed-b1024-s512",
        "model": "benchmarks/models/plackett_luce_ranker.py:make_model",
        "batch_size": 1024,
        "seq_len": 512,
        "precision": "bf16-mixed",
    },
]

# Held out: more models written by hand (no zoo), with ops the lists above lack: adaLN-Zero
# modulation with patchify and unpatchify, a fixed-step RK4 loop, masked induced set
# attention, per-sample generated weights run by vmap over functional_call, a
# torch.distributions mixture likelihood, product-key top-k lookups, a chunked linear-attention
# recurrence with checkpointed slices of the output head, modulated deformable convolutions,
# argsort masking with checkpointed blocks, an EMA teacher updated by foreach ops in the loss;
# predicted with predict.py and committed before gpu_measure.py measures them.
HELD_OUT_HANDWRITTEN_FOURTH: list[dict[str, Any]] = [
    {
        "id": "hw4-dit-bf16mixed-b64",
        "model": "benchmarks/models/dit.py:make_model",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw4-neural-ode-fp32-b128",
        "model": "benchmarks/models/neural_ode.py:make_model",
        "batch_size": 128,
    },
    {
        "id": "hw4-set-transformer-fp16mixed-b128-s4096",
        "model": "benchmarks/models/set_transformer.py:make_model",
        "batch_size": 128,
        "seq_len": 4096,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw4-hypernetwork-fp32-b128",
        "model": "benchmarks/models/hypernetwork.py:make_model",
        "batch_size": 128,
    },
    {
        "id": "hw4-mixture-density-fp32-b65536",
        "model": "benchmarks/models/mixture_density.py:make_model",
        "batch_size": 65536,
    },
    {
        "id": "hw4-product-key-lm-bf16mixed-b16-s1024",
        "model": "benchmarks/models/product_key_lm.py:make_model",
        "batch_size": 16,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw4-rwkv-lm-bf16mixed-b16-s1024",
        "model": "benchmarks/models/rwkv_lm.py:make_model",
        "batch_size": 16,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw4-deformable-segmenter-fp16mixed-b64",
        "model": "benchmarks/models/deformable_segmenter.py:make_model",
        "batch_size": 64,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw4-masked-autoencoder-bf16mixed-b256",
        "model": "benchmarks/models/masked_autoencoder.py:make_model",
        "batch_size": 256,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw4-dino-convnext-fp16mixed-b64",
        "model": "benchmarks/models/dino_convnext.py:make_model",
        "batch_size": 64,
        "precision": "fp16-mixed",
    },
]

# Held out, a fifth set of models written by hand (no zoo), with ops the lists above lack:
# Fourier token mixing by two torch.fft.fft calls with checkpointed blocks, an all-pairs cost
# volume by einsum with a soft-argmax flow warped by grid_sample from a meshgrid, per-pixel
# involution kernels over F.unfold, voxel pooling by scatter_reduce amax and index_add means
# read back by indexing, a packed bidirectional LSTM with an LSTMCell decoder loop and
# additive attention, a Gumbel-softmax codebook with pixel_shuffle, a matrix product state
# contracted as a tree of batched matmuls, volume rendering by cumprod with inverse-CDF
# sampling by cumsum, searchsorted and sort, complex64 parameters between stft and istft,
# LSH attention by argsort and gather with an adaptive softmax; predicted with predict.py and
# committed before gpu_measure.py measures them.
HELD_OUT_HANDWRITTEN_FIFTH: list[dict[str, Any]] = [
    {
        "id": "hw5-fnet-mixer-bf16mixed-b64-s1024",
        "model": "benchmarks/models/fnet_mixer.py:make_model",
        "batch_size": 64,
        "seq_len": 1024,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw5-flow-warp-fp16mixed-b128",
        "model": "benchmarks/models/flow_warp.py:make_model",
        "batch_size": 128,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw5-involution-net-bf16mixed-b128",
        "model": "benchmarks/models/involution_net.py:make_model",
        "batch_size": 128,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw5-voxel-point-seg-fp32-b16",
        "model": "benchmarks/models/voxel_point_seg.py:make_model",
        "batch_size": 16,
    },
    {
        "id": "hw5-lstm-seq2seq-fp16mixed-b128-s128",
        "model": "benchmarks/models/lstm_seq2seq.py:make_model",
        "batch_size": 128,
        "seq_len": 128,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw5-gumbel-dvae-bf16mixed-b64",
        "model": "benchmarks/models/gumbel_dvae.py:make_model",
        "batch_size": 64,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw5-mps-classifier-fp32-b384",
        "model": "benchmarks/models/mps_classifier.py:make_model",
        "batch_size": 384,
    },
    {
        "id": "hw5-tiny-nerf-fp32-b4096",
        "model": "benchmarks/models/tiny_nerf.py:make_model",
        "batch_size": 4096,
    },
    {
        "id": "hw5-complex-enhancer-fp32-b256",
        "model": "benchmarks/models/complex_enhancer.py:make_model",
        "batch_size": 256,
    },
    {
        "id": "hw5-lsh-attention-lm-fp16mixed-b8-s4096",
        "model": "benchmarks/models/lsh_attention_lm.py:make_model",
        "batch_size": 8,
        "seq_len": 4096,
        "precision": "fp16-mixed",
    },
]

# Held out, a sixth set of models written by hand (no zoo), with ops the lists above lack:
# SegNet's max_pool2d with return_indices undone by max_unpool2d, spectral_norm
# parametrizations in a GAN discriminator, a WGAN-GP gradient penalty by autograd.grad with
# create_graph (double backward), nn.TransformerEncoder/nn.TransformerDecoder with key padding
# and causal masks, patch inpainting by F.unfold and F.fold, a 3-D U-Net of Conv3d,
# ConvTranspose3d and InstanceNorm3d, a biaffine parser with an LSTM's proj_size and
# nn.Bilinear, point cloud registration by torch.linalg.svd and det, rotary embeddings by
# view_as_complex and torch.polar with grouped-query attention, and an EDSR with replicate
# padding, pixel_shuffle and a bicubic skip; predicted with predict.py and committed before
# gpu_measure.py measures them.
HELD_OUT_HANDWRITTEN_SIXTH: list[dict[str, Any]] = [
    {
        "id": "hw6-segnet-unpool-fp16mixed-b24",
        "model": "benchmarks/models/segnet_unpool.py:make_model",
        "batch_size": 24,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw6-sngan-discriminator-bf16mixed-b256",
        "model": "benchmarks/models/sngan_discriminator.py:make_model",
        "batch_size": 256,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw6-wgan-gp-fp32-b128",
        "model": "benchmarks/models/wgan_gp.py:make_model",
        "batch_size": 128,
    },
    {
        "id": "hw6-transformer-translator-bf16mixed-b64-s256",
        "model": "benchmarks/models/transformer_translator.py:make_model",
        "batch_size": 64,
        "seq_len": 256,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw6-fold-inpainting-fp16mixed-b64",
        "model": "benchmarks/models/fold_inpainting.py:make_model",
        "batch_size": 64,
        "precision": "fp16-mixed",
    },
    {
        "id": "hw6-unet3d-volume-bf16mixed-b4",
        "model": "benchmarks/models/unet3d_volume.py:make_model",
        "batch_size": 4,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw6-biaffine-parser-fp32-b1024-s64",
        "model": "benchmarks/models/biaffine_parser.py:make_model",
        "batch_size": 1024,
        "seq_len": 64,
    },
    {
        "id": "hw6-dcp-registration-fp32-b32",
        "model": "benchmarks/models/dcp_registration.py:make_model",
        "batch_size": 32,
    },
    {
        "id": "hw6-complex-rotary-lm-bf16mixed-b8-s2048",
        "model": "benchmarks/models/complex_rotary_lm.py:make_model",
        "batch_size": 8,
        "seq_len": 2048,
        "precision": "bf16-mixed",
    },
    {
        "id": "hw6-bicubic-sr-fp16mixed-b16",
        "model": "benchmarks/models/bicubic_sr.py:make_model",
        "batch_size": 16,
        "precision": "fp16-mixed",
    },
]

# Held out for the optimizer stepped on the host (techniques={"host_optimizer": True}): each
# predicted with predict.py and committed before gpu_measure.py ran it
_ON_HOST = {"techniques": {"host_optimizer": True}}
HELD_OUT_HOST_OPTIMIZER: list[dict[str, Any]] = [
    {"id": "gpt2-fp32-b8-s512-host-optimizer", "model": "gpt2", "batch_size": 8, "seq_len": 512}
    | _ON_HOST,
    {
        "id": "gpt2-bf16mixed-b8-s512-acc2-host-optimizer",
        "model": "gpt2",
        "batch_size": 8,
        "seq_len": 512,
        "precision": "bf16-mixed",
        "accumulation": 2,
    }
    | _ON_HOST,
    {
        "id": "bert-base-bf16mixed-b32-s512-host-optimizer",
        "model": "bert-base-uncased",
        "batch_size": 32,
        "seq_len": 512,
        "precision": "bf16-mixed",
    }
    | _ON_HOST,
    {
        "id": "tinyllama-bf16mixed-b8-s1024-ckpt-host-optimizer",
        "model": "tinyllama-1.1b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "checkpointing": True,
    }
    | _ON_HOST,
    {
        "id": "qwen2.5-0.5b-bf16-b4-s1024-host-optimizer",
        "model": "qwen2.5-0.5b",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16",
    }
    | _ON_HOST,
]

# Held out for LoRA through PEFT (techniques={"lora": 16}): four architectures, each predicted
# with predict.py and committed before gpu_measure.py ran it
HELD_OUT_LORA: list[dict[str, Any]] = [
    {
        "id": "tinyllama-bf16-b8-s1024-lora16",
        "model": "tinyllama-1.1b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"lora": 16},
    },
    {
        "id": "qwen2.5-0.5b-bf16mixed-b8-s1024-lora16",
        "model": "qwen2.5-0.5b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16-mixed",
        "techniques": {"lora": 16},
    },
    {
        "id": "mistral-7b-bf16-b2-s1024-ckpt-lora16",
        "model": "mistral-7b-v0.1",
        "batch_size": 2,
        "seq_len": 1024,
        "precision": "bf16",
        "checkpointing": True,
        "techniques": {"lora": 16},
    },
    {
        "id": "gemma-2b-bf16-b4-s1024-lora64",
        "model": "benchmarks/models/gemma_2b.py:make_model",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"lora": 64},
    },
]

# Held out for QLoRA (techniques={"quantize": "nf4", "lora": R}): the same four architectures,
# each predicted with predict.py and committed before gpu_measure.py ran it
HELD_OUT_QLORA: list[dict[str, Any]] = [
    {
        "id": "tinyllama-bf16-b8-s1024-nf4-lora16",
        "model": "tinyllama-1.1b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"quantize": "nf4", "lora": 16},
    },
    {
        "id": "qwen2.5-0.5b-bf16-b8-s1024-nf4-lora16",
        "model": "qwen2.5-0.5b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"quantize": "nf4", "lora": 16},
    },
    {
        "id": "mistral-7b-bf16-b4-s1024-ckpt-nf4-lora16",
        "model": "mistral-7b-v0.1",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16",
        "checkpointing": True,
        "techniques": {"quantize": "nf4", "lora": 16},
    },
    {
        "id": "gemma-2b-bf16-b4-s1024-nf4-lora64",
        "model": "benchmarks/models/gemma_2b.py:make_model",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"quantize": "nf4", "lora": 64},
    },
]

# Held out for LoRA on LLM.int8 weights (techniques={"quantize": "int8", "lora": R}): the same
# four architectures, each predicted with predict.py and committed before gpu_measure.py ran it
HELD_OUT_INT8_LORA: list[dict[str, Any]] = [
    {
        "id": "tinyllama-bf16-b8-s1024-int8-lora16",
        "model": "tinyllama-1.1b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"quantize": "int8", "lora": 16},
    },
    {
        "id": "qwen2.5-0.5b-bf16-b8-s1024-int8-lora16",
        "model": "qwen2.5-0.5b",
        "batch_size": 8,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"quantize": "int8", "lora": 16},
    },
    {
        "id": "mistral-7b-bf16-b4-s1024-ckpt-int8-lora16",
        "model": "mistral-7b-v0.1",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16",
        "checkpointing": True,
        "techniques": {"quantize": "int8", "lora": 16},
    },
    {
        "id": "gemma-2b-bf16-b4-s1024-int8-lora64",
        "model": "benchmarks/models/gemma_2b.py:make_model",
        "batch_size": 4,
        "seq_len": 1024,
        "precision": "bf16",
        "techniques": {"quantize": "int8", "lora": 64},
    },
]

ALL = (
    WORKLOADS
    + HELD_OUT
    + HELD_OUT_FAMILIES
    + HELD_OUT_USER_STEPS
    + HELD_OUT_COMPILED
    + HELD_OUT_COMPILED_FAMILIES
    + HELD_OUT_ACCUMULATION
    + COMPILED_DEV
    + MOE_DEV
    + HELD_OUT_IN_BACKWARD
    + HELD_OUT_EIGHT_BIT
    + HELD_OUT_BUDGET
    + HELD_OUT_OFFLOAD
    + HELD_OUT_OFFLOAD_2
    + ALIGN_OFFLOADED_INPUTS
    + ALIGN_HELD_BATCH
    + HELD_OUT_VISION_LAYOUTS
    + ALIGN_APPLIED_PLANS
    + ALIGN_CACHE_FREE
    + HELD_OUT_EXPANDABLE_CKPT
    + HELD_OUT_DDP
    + HELD_OUT_FSDP2
    + HELD_OUT_FSDP2_MP
    + HELD_OUT_ZERO
    + HELD_OUT_ZERO_2
    + DDP_GAP
    + HELD_OUT_TIED_HEAD
    + HELD_OUT_HANDWRITTEN
    + HELD_OUT_HANDWRITTEN_SECOND
    + HELD_OUT_HANDWRITTEN_THIRD
    + HELD_OUT_HANDWRITTEN_FOURTH
    + HELD_OUT_HANDWRITTEN_FIFTH
    + HELD_OUT_HANDWRITTEN_SIXTH
    + HELD_OUT_HOST_OPTIMIZER
    + HELD_OUT_LORA
    + HELD_OUT_QLORA
    + HELD_OUT_INT8_LORA
)
