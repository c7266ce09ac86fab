"""The bundled offline model catalog: schema, uniqueness and exact parameter counts.

Every ``src/memfit/catalog/<name>.json`` entry is checked for its schema, and its model is
built on the meta device (no weights, no network) to confirm the recorded parameter count
and, where one is well known, that it sits within 2 % of the published size.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

CATALOG_DIR = Path(__file__).resolve().parents[2] / "src" / "memfit" / "workload" / "catalog"

SOURCES = {"hf", "tv", "timm"}
HF_TASKS = {
    "masked-lm": "AutoModelForMaskedLM",
    "causal-lm": "AutoModelForCausalLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
}
VISION_TASKS = {"image-classification"}
REQUIRED = {
    "name": str,
    "aliases": list,
    "source": str,
    "task": str,
    "config": dict,
    "parameters": int,
    "description": str,
}
# Fields of a hub config.json that say nothing about the architecture; they stay out.
CONFIG_NOISE = {
    "_name_or_path",
    "transformers_version",
    "task_specific_params",
    "use_cache",
    "id2label",
    "label2id",
    "gradient_checkpointing",
    "output_past",
}
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

# Published sizes (model cards / papers / torchvision and timm docs), checked to within 2 %.
PUBLISHED = {
    "bert-base-uncased": 110e6,
    "bert-large-uncased": 340e6,
    "roberta-base": 125e6,
    "gpt2": 124e6,
    "gpt2-medium": 355e6,
    "gpt2-large": 774e6,
    "gpt2-xl": 1.558e9,
    "llama-2-7b-hf": 6.74e9,
    "llama-2-13b-hf": 13.0e9,
    "llama-2-70b-hf": 69.0e9,
    "meta-llama-3-8b": 8.03e9,
    "meta-llama-3-70b": 70.6e9,
    "mistral-7b-v0.1": 7.24e9,
    "qwen2.5-7b": 7.61e9,
    "qwen2.5-0.5b": 0.49e9,
    "tinyllama-1.1b-intermediate-step-1431k-3t": 1.1e9,
    "t5-small": 60.5e6,
    "t5-base": 223e6,
    "vit-base-patch16-224": 86.6e6,
    "resnet50": 25.6e6,
    "vit_b_16": 86.6e6,
    "convnext_tiny": 28.6e6,
    "efficientnet_b0": 5.3e6,
}


def _load() -> dict[str, dict[str, Any]]:
    entries = {}
    for path in sorted(CATALOG_DIR.glob("*.json")):
        with path.open(encoding="utf-8") as f:
            entries[path.stem] = json.load(f)
    return entries


ENTRIES = _load()
HF_IDS = [stem for stem, e in ENTRIES.items() if e.get("source") == "hf"]
VISION_IDS = [stem for stem, e in ENTRIES.items() if e.get("source") in {"tv", "timm"}]


def _norm(key: str) -> str:
    return key.lower().replace("_", "-")


def _count(model: Any) -> int:
    # parameters() skips a shared tensor after its first appearance: tied weights count once.
    return sum(p.numel() for p in model.parameters())


def _check_count(entry: dict[str, Any], counted: int) -> None:
    assert counted == entry["parameters"], (
        f"{entry['name']}: built {counted:,} parameters, catalog says {entry['parameters']:,}"
    )
    published = PUBLISHED.get(entry["name"])
    if published is not None:
        assert abs(counted - published) / published <= 0.02, (
            f"{entry['name']}: {counted:,} is more than 2% away from the published {published:,.0f}"
        )


def test_catalog_is_populated() -> None:
    assert len(ENTRIES) >= 20
    assert "bert-base-uncased" in ENTRIES


@pytest.mark.parametrize("stem", sorted(ENTRIES))
def test_schema(stem: str) -> None:
    e = ENTRIES[stem]
    for key, typ in REQUIRED.items():
        assert key in e, f"{stem}: missing {key!r}"
        assert isinstance(e[key], typ) and not isinstance(e[key], bool), f"{stem}: {key} type"
    assert e["name"] == stem, "file must be named <name>.json"
    assert NAME_RE.match(e["name"]), f"{stem}: name must be lowercase"
    assert all(isinstance(a, str) and NAME_RE.match(a) for a in e["aliases"]), e["aliases"]
    assert e["source"] in SOURCES
    assert e["parameters"] > 0
    assert e["description"].strip()

    if e["source"] == "hf":
        assert e["task"] in HF_TASKS
        assert isinstance(e.get("hub_id"), str) and e["hub_id"].count("/") == 1
        assert e["hub_id"].split("/")[1].lower() == e["name"], "name is the hub id's last part"
        assert isinstance(e.get("config_source"), str) and e["config_source"].strip()
        assert "builder" not in e
        cfg = e["config"]
        assert isinstance(cfg.get("model_type"), str)
        assert not CONFIG_NOISE & set(cfg), f"{stem}: noise keys {CONFIG_NOISE & set(cfg)}"
    else:
        assert e["task"] in VISION_TASKS
        assert isinstance(e.get("builder"), str) and e["builder"]
        assert "hub_id" not in e

    if e["task"] in VISION_TASKS:
        assert isinstance(e.get("image_size"), int) and e["image_size"] > 0
        assert "default_seq_len" not in e
    else:
        assert isinstance(e.get("default_seq_len"), int) and e["default_seq_len"] > 0
        assert "image_size" not in e


def test_names_and_aliases_are_unique() -> None:
    seen: dict[str, str] = {}
    for stem, e in ENTRIES.items():
        keys = [e["name"], *e["aliases"]]
        if e.get("hub_id"):
            keys.append(e["hub_id"])
        for key in {_norm(k) for k in keys}:
            assert key not in seen, f"{key!r} is claimed by both {seen[key]} and {stem}"
            seen[key] = stem


@pytest.mark.parametrize("stem", HF_IDS)
def test_hf_parameter_count(stem: str) -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    e = ENTRIES[stem]
    auto_cls = getattr(transformers, HF_TASKS[e["task"]])
    config = transformers.AutoConfig.for_model(**e["config"])
    with torch.device("meta"):
        model = auto_cls.from_config(config)
    assert type(model).__name__ in e["config"].get("architectures", [type(model).__name__])
    _check_count(e, _count(model))


@pytest.mark.parametrize("stem", VISION_IDS)
def test_vision_parameter_count(stem: str) -> None:
    import torch

    e = ENTRIES[stem]
    if e["source"] == "tv":
        torchvision = pytest.importorskip("torchvision")
        with torch.device("meta"):
            model = torchvision.models.get_model(e["builder"], weights=None, **e["config"])
    else:
        timm = pytest.importorskip("timm")
        with torch.device("meta"):
            model = timm.create_model(e["builder"], pretrained=False, **e["config"])
    _check_count(e, _count(model))


def test_known_architectural_facts() -> None:
    """Spot checks of values the catalog must carry exactly as the hub configs do."""
    c = {stem: e["config"] for stem, e in ENTRIES.items()}
    for stem in ("llama-2-7b-hf", "llama-2-13b-hf", "llama-2-70b-hf"):
        assert c[stem]["model_type"] == "llama"
        assert c[stem]["vocab_size"] == 32000
        assert c[stem]["rms_norm_eps"] == 1e-5
        assert c[stem]["max_position_embeddings"] == 4096
    assert c["llama-2-70b-hf"]["num_key_value_heads"] == 8
    for stem in ("meta-llama-3-8b", "meta-llama-3-70b"):
        assert c[stem]["vocab_size"] == 128256
        assert c[stem]["rope_theta"] == 500000.0
        assert c[stem]["num_key_value_heads"] == 8
    assert c["mistral-7b-v0.1"]["sliding_window"] == 4096
    assert c["qwen2.5-7b"]["tie_word_embeddings"] is False
    assert c["qwen2.5-0.5b"]["tie_word_embeddings"] is True
