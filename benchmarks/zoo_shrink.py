"""Shrinking a transformers config generically, so that any model type builds small but real.

The default config of a type (``CONFIG_MAPPING[type]()``) is taken as a dictionary and shrunk
(``shrink``): layer counts to 2 (more where its per-layer lists name more kinds of layer, up to
4), hidden sizes to 256 with 4 heads of 64, feed-forward sizes to 1,024 (experts' to 256),
experts to at most 64, every sub-config the same way, per-layer lists cut to the new depth
keeping one of each kind (a hybrid's linear and full attention layers both stay), and the sizes
that must agree with those (``_derived_sizes``). Wider variants are tried where the narrow one
does not build (``VARIANTS``). ``config_diff`` keeps only what differs from the default, sub-
configs included, which is what a config is rebuilt from (``AutoConfig.for_model(type,
**diff)``): a whole ``to_dict()`` does not always go back into its class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["VARIANTS", "Variant", "config_diff", "is_size", "shrink"]

LAYERS = {
    "num_hidden_layers",
    "num_layers",
    "n_layer",
    "n_layers",
    "encoder_layers",
    "decoder_layers",
    "num_encoder_layers",
    "num_decoder_layers",
    "decoder_num_hidden_layers",
    "depth",
    "num_text_layers",
    "num_vision_layers",
}
HIDDEN = {
    "hidden_size",
    "d_model",
    "n_embd",
    "embed_dim",
    "dim",
    "hidden_dim",
    "model_dim",
    "decoder_hidden_size",
}
FFN = {
    "intermediate_size",
    "d_ff",
    "ffn_dim",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "n_inner",
    "mlp_dim",
    "decoder_intermediate_size",
    "ffn_hidden_size",
    "intermediate_dim",
}
EXPERT_FFN = {
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "shared_intermediate_size",
    "expert_intermediate_size",
}
HEADS_KEYS = {
    "num_attention_heads",
    "n_head",
    "n_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "num_heads",
    "attention_heads",
    "decoder_num_attention_heads",
}
KV_HEADS = {"num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"}
HEAD_DIM = {"head_dim", "d_kv"}
EXPERTS = {"num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"}
TOP_K = {"num_experts_per_tok", "moe_topk", "num_selected_experts"}
MAX_EXPERTS = 64


@dataclass(frozen=True)
class Variant:
    """How far a config is shrunk: its layers, width, heads (of head_dim each) and FFN."""

    name: str
    layers: int | None
    hidden: int | None
    heads: int | None
    ffn: int | None

    @property
    def head_dim(self) -> int | None:
        return None if self.hidden is None or self.heads is None else self.hidden // self.heads


VARIANTS = [
    Variant("256-wide", 2, 256, 4, 1024),
    Variant("512-wide", 2, 512, 8, 2048),
    Variant("layers-only", 2, None, None, None),
]


def is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _per_layer(values: list[Any], depth: int) -> list[Any]:
    """A per-layer list cut to ``depth`` entries, keeping one of each kind where it can (a
    hybrid's linear and full attention layers both stay)."""
    kinds: list[Any] = []
    for value in values:
        if value not in kinds:
            kinds.append(value)
    return kinds[:depth] if len(kinds) >= depth else kinds + [values[0]] * (depth - len(kinds))


def _depth_after(config: dict[str, Any], variant: Variant) -> tuple[int | None, int | None]:
    """The config's layer count and the count after shrinking (more than ``variant.layers``
    where its per-layer lists name more kinds of layer)."""
    if variant.layers is None:
        return None, None
    counts = [config[k] for k in sorted(LAYERS) if is_size(config.get(k))]
    old = max(counts, default=None)
    if old is None:
        return None, variant.layers
    kinds = max(
        (
            len({repr(v) for v in value})
            for value in config.values()
            if isinstance(value, list) and len(value) == old and old > 1
        ),
        default=1,
    )
    return old, max(variant.layers, min(kinds, 4))


def shrink(config: dict[str, Any], variant: Variant) -> dict[str, Any]:
    """``config`` (a config's ``to_dict()``) shrunk as ``variant`` says; sub-configs alike."""
    out = dict(config)
    old_depth, depth = _depth_after(config, variant)
    heads_before = next((config[k] for k in HEADS_KEYS if is_size(config.get(k))), None)
    for key, value in config.items():
        if isinstance(value, dict) and ("model_type" in value or key.endswith("config")):
            out[key] = shrink(value, variant)
        elif key in LAYERS and is_size(value) and depth is not None and value > depth:
            out[key] = depth
        elif key == "depths" and isinstance(value, list) and variant.layers is not None:
            out[key] = [min(v, variant.layers) if is_size(v) else v for v in value]
        elif (
            isinstance(value, list)
            and old_depth is not None
            and depth is not None
            and len(value) == old_depth > depth
        ):
            out[key] = _per_layer(value, depth)
        elif not is_size(value):
            continue
        elif key in HIDDEN and variant.hidden and value > variant.hidden:
            out[key] = variant.hidden
        elif key in FFN and variant.ffn and value > variant.ffn:
            out[key] = variant.ffn
        elif key in EXPERT_FFN and variant.hidden and value > variant.hidden:
            out[key] = variant.hidden
        elif key in HEADS_KEYS and variant.heads and value > variant.heads:
            out[key] = variant.heads
        elif key in KV_HEADS and variant.heads and value > 1:
            grouped = heads_before is not None and value < heads_before
            out[key] = min(value, variant.heads // 2 if grouped else variant.heads)
        elif key in HEAD_DIM and variant.head_dim and value > variant.head_dim:
            out[key] = variant.head_dim
        elif key in EXPERTS and value > MAX_EXPERTS:
            out[key] = MAX_EXPERTS
        elif key == "first_k_dense_replace" and depth is not None and value >= depth:
            out[key] = 1  # a mixture-of-experts layer stays
    if old_depth is not None and depth is not None:
        _layer_references(out, config, old_depth, depth)
    _derived_sizes(out)
    return out


def _layer_references(out: dict[str, Any], config: dict[str, Any], old: int, depth: int) -> None:
    """Settings that name layers, brought inside the new depth so that every kind of layer
    stays: indices of a hybrid's attention layers (the last layer takes it), a kind's offset and
    period, a cycle of block types (each kind first), layer counts of a feature."""
    for key, value in config.items():
        if key in LAYERS or ("layer" not in key and "type" not in key):
            continue
        if (
            isinstance(value, list)
            and value
            and all(is_size(v) and 0 <= v < old for v in value)
            and len(value) < old
            and "layer" in key
        ):
            out[key] = [depth - 1]
        elif (
            isinstance(value, list)
            and 1 < len(value) < old
            and all(isinstance(v, str) for v in value)
        ):
            kinds = list(dict.fromkeys(value))
            rest = list(value)
            for kind in kinds:
                rest.remove(kind)
            out[key] = kinds + rest  # a cycle: each kind among the first layers
        elif not is_size(value):
            continue
        elif key.endswith("_offset") and value >= depth:
            out[key] = depth - 1
        elif key.endswith("_period") and value > depth:
            out[key] = depth
        elif key.endswith(("window_layers", "shared_layers")):
            out[key] = depth if value >= old else value * depth // old


def _derived_sizes(out: dict[str, Any]) -> None:
    """Sizes that must agree with the ones shrunk: top-k within the experts, expert groups that
    divide them, a state-space model's heads that span its expanded width, a decoder's start
    token (the default configs of some encoder-decoders leave it out; their checkpoints set it)."""
    experts = next((out[k] for k in EXPERTS if is_size(out.get(k))), None)
    if experts is not None:
        for key in TOP_K:
            if is_size(out.get(key)) and out[key] > experts:
                out[key] = experts
        if is_size(out.get("n_group")) and experts % out["n_group"]:
            out["n_group"] = math.gcd(experts, out["n_group"])
    hidden = out.get("hidden_size")
    expand, heads, head_dim = out.get("expand"), out.get("num_heads"), out.get("head_dim")
    if all(is_size(v) for v in (hidden, expand, heads, head_dim)) and heads * head_dim != (
        expand * hidden
    ):
        out["num_heads"] = max(1, expand * hidden // head_dim)
    if out.get("is_encoder_decoder") and out.get("decoder_start_token_id") is None:
        out["decoder_start_token_id"] = out.get("pad_token_id") or 0


# -- building ------------------------------------------------------------------------------------


def config_diff(default: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """What ``values`` changes in ``default``; a changed sub-config as its own difference,
    with its ``model_type`` (which some parents need to pick the sub-config's class)."""
    diff: dict[str, Any] = {}
    for key, value in values.items():
        before = default.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            inner = config_diff(before, value)
            if inner:
                if "model_type" in before:
                    inner["model_type"] = before["model_type"]
                diff[key] = inner
        elif key not in default or before != value:
            diff[key] = value
    return diff
