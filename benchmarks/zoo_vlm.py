"""The zoo's vision-language models (``AutoModelForImageTextToText``): per family, how many
placeholder tokens an image becomes and which tensors carry it, and the config changes its
inputs need. ``zoo_hf`` builds the models and calls these for its image-text head.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from zoo_shrink import is_size

# -- the families ----------------------------------------------------------------------
#
# A sample is an image's run of placeholder tokens, then text: the model puts the image's
# features where the placeholders are and checks their count, so each family's rule says how
# many tokens its image becomes (as its processor counts them) and which tensors carry the
# image. The loss is the model's own on the text: the image's positions are labelled -100.

IMAGE_SIDE = 448  # the square image of a family that takes any resolution


def _vision_size(config: Any, name: str) -> int:
    value = getattr(config.vision_config, name)
    return int(value[0] if isinstance(value, (list, tuple)) else value)


def _pixels(*shape: int, flat: bool = False) -> dict[str, Any]:
    """A random image tensor of this shape per sample (``flat``: its first dimension joins the
    batch's, as a list of images or of patches does)."""
    return {"shape": list(shape), "flat": flat}


def _image_run(config: Any, tokens: int, **tensors: Any) -> dict[str, Any]:
    token = getattr(config, "image_token_id", None)
    token = getattr(config, "image_token_index", None) if token is None else token
    return {"prompt": [[int(token), tokens]], "tensors": tensors}


def _tower_tokens(config: Any, patches: int) -> int:
    """A ViT's tokens for ``patches`` patches: CLIP-like towers add a class token; the
    ``default`` feature selection drops the first token."""
    cls = int(config.vision_config.model_type.startswith("clip"))
    drop = int(getattr(config, "vision_feature_select_strategy", "full") == "default")
    return patches + cls - drop


def _text_width(config: Any, name: str, vision: bool = False) -> dict[str, Any]:
    """The change that makes the width ``name`` (of the vision sub-config with ``vision``) the
    text's, as it is in the released checkpoints: the projection into the text's embeddings
    is sized by it, and the shrink cuts the text's width, not this one."""
    holder = config.vision_config if vision else config
    width = config.get_text_config().hidden_size
    if getattr(holder, name) == width:
        return {}
    if vision:
        return {"vision_config": {"model_type": holder.model_type, name: width}}
    return {name: width}


def _llava(config: Any) -> dict[str, Any]:
    side, patch = _vision_size(config, "image_size"), _vision_size(config, "patch_size")
    tokens = _tower_tokens(config, (side // patch) ** 2)
    return _image_run(config, tokens, pixel_values=_pixels(3, side, side))


def _video_llava(config: Any) -> dict[str, Any]:
    """LLaVA's image under the name Video-LLaVA gives it (``pixel_values_images``)."""
    rule = _llava(config)
    rule["tensors"] = {"pixel_values_images": rule["tensors"]["pixel_values"]}
    return rule


def _vipllava(config: Any) -> dict[str, Any]:
    """The tower's patches (its class token dropped) from several layers, concatenated: each
    layer's index is taken within the shrunk tower (its embeddings' output, then each layer's)."""
    side, patch = _vision_size(config, "image_size"), _vision_size(config, "patch_size")
    rule = _image_run(config, (side // patch) ** 2, pixel_values=_pixels(3, side, side))
    depth = config.vision_config.num_hidden_layers + 1
    rule["config"] = {"vision_feature_layers": [i % depth for i in config.vision_feature_layers]}
    return rule


def _anyres(config: Any) -> dict[str, Any]:
    """LLaVA-NeXT's tiling: an image at the smallest grid of ``image_grid_pinpoints`` is cut into
    tiles of the tower's size, and given with its thumbnail (one more tile); its tokens are the
    thumbnail's, then the grid's rows of tile features, each row ending in a newline token. The
    tile is the pinpoints' common unit, the tower's size in the released checkpoints."""
    pinpoints = config.image_grid_pinpoints
    tile = math.gcd(*[side for point in pinpoints for side in point])
    height, width = min(pinpoints, key=lambda point: point[0] * point[1])
    side = tile // _vision_size(config, "patch_size")
    rows, columns = height // tile * side, width // tile * side
    tokens = _tower_tokens(config, side * side) + rows * (columns + 1)
    tiles = 1 + (height // tile) * (width // tile)
    rule = _image_run(
        config,
        tokens,
        pixel_values=_pixels(tiles, 3, tile, tile),
        image_sizes={"value": [height, width]},
    )
    if _vision_size(config, "image_size") != tile:
        vision = config.vision_config
        rule["config"] = {"vision_config": {"model_type": vision.model_type, "image_size": tile}}
    return rule


def _paligemma(config: Any) -> dict[str, Any]:
    """The image and any prompt are a prefix seen both ways (token type 0); the text that is
    learnt is the suffix (1)."""
    side, patch = _vision_size(config, "image_size"), _vision_size(config, "patch_size")
    rule = _image_run(config, (side // patch) ** 2, pixel_values=_pixels(3, side, side))
    rule["tensors"]["token_type_ids"] = {"runs": [0], "text": 1}
    # its Gemma has one key-value head; the shrunk text config, rebuilt from Gemma's own
    # defaults, would have more than its heads
    text = {"model_type": config.text_config.model_type, "num_key_value_heads": 1}
    rule["config"] = {"text_config": text, **_text_width(config, "projection_dim")}
    return rule


def _idefics3(config: Any) -> dict[str, Any]:
    """One image per sample, its side a whole number of pixel-shuffle blocks (patches times the
    scale factor); the tower's position buckets take any side."""
    unit = _vision_size(config, "patch_size") * config.scale_factor
    side = -(-_vision_size(config, "image_size") // unit) * unit
    return _image_run(
        config,
        (side // unit) ** 2,
        pixel_values=_pixels(1, 3, side, side),
        pixel_attention_mask={"shape": [1, side, side], "fill": True},
    )


def _qwen2_vl(config: Any, sections: tuple[int, int, int] = (16, 24, 24)) -> dict[str, Any]:
    """Flattened patches (two frames of each, as a still image is repeated in time) with the
    image's grid; each 2 x 2 block of patches is a token, between the vision start and end
    tokens that the rotary positions look for. The rotary sections (time, height, width) split
    the text's head: the family's own, for a head of 128, cut in proportion to the shrunk one."""
    vision = config.vision_config
    patch, merge, frames = vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size
    grid = IMAGE_SIDE // patch // merge * merge
    rule = _image_run(
        config,
        grid * grid // merge**2,
        pixel_values=_pixels(grid * grid, vision.in_channels * frames * patch * patch, flat=True),
        image_grid_thw={"value": [[1, grid, grid]], "flat": True},
    )
    start, end = config.vision_start_token_id, config.vision_end_token_id
    rule["prompt"] = [[start, 1], *rule["prompt"], [end, 1]]
    rule["tensors"]["mm_token_type_ids"] = {"runs": [0, 1, 0], "text": 0}  # 1: an image's
    text = config.get_text_config()
    half = (getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads) // 2
    cut = [section * half // 64 for section in sections[:2]]
    rope = {**text.rope_parameters, "mrope_section": [*cut, half - sum(cut)]}
    rule["config"] = {"text_config": {"model_type": text.model_type, "rope_parameters": rope}}
    if hasattr(vision, "out_hidden_size"):  # the merger's output (Qwen2.5-VL, Qwen3-VL)
        rule["config"] |= _text_width(config, "out_hidden_size", vision=True)
    return rule


def _qwen3_vl(config: Any) -> dict[str, Any]:
    return _qwen2_vl(config, sections=(24, 20, 20))


def _internvl(config: Any) -> dict[str, Any]:
    side, patch = _vision_size(config, "image_size"), _vision_size(config, "patch_size")
    patches = int((side // patch) ** 2 * config.downsample_ratio**2)
    return _image_run(config, patches, pixel_values=_pixels(3, side, side))


def _mistral3(config: Any) -> dict[str, Any]:
    """Pixtral takes any size up to its own: each 2 x 2 block of patches is a token."""
    unit = _vision_size(config, "patch_size") * config.spatial_merge_size
    side = min(IMAGE_SIDE, _vision_size(config, "image_size")) // unit * unit
    return _image_run(
        config,
        (side // unit) ** 2,
        pixel_values=_pixels(3, side, side),
        image_sizes={"value": [side, side]},
    )


def _shuffled(config: Any) -> dict[str, Any]:
    """A ViT whose patches are folded ``downsample_factor`` x ``downsample_factor`` into one
    token (pixel shuffle)."""
    side, patch = _vision_size(config, "image_size"), _vision_size(config, "patch_size")
    tokens = (side // patch // config.downsample_factor) ** 2
    return _image_run(config, tokens, pixel_values=_pixels(3, side, side))


def _lfm2_vl(config: Any) -> dict[str, Any]:
    """SigLIP2's flexible resolution: the image as a sequence of flattened patches with its grid
    (``spatial_shapes``) and a mask of the real ones; 2 x 2 patches are a token."""
    vision = config.vision_config
    grid = math.isqrt(vision.num_patches) // config.downsample_factor * config.downsample_factor
    patch = vision.patch_size
    return _image_run(
        config,
        (grid // config.downsample_factor) ** 2,
        pixel_values=_pixels(grid * grid, vision.num_channels * patch * patch),
        pixel_attention_mask={"shape": [grid * grid], "fill": True},
        spatial_shapes={"value": [grid, grid]},
    )


def _ovis2(config: Any) -> dict[str, Any]:
    side, patch = _vision_size(config, "image_size"), _vision_size(config, "patch_size")
    stride = config.vision_config.hidden_stride
    tokens = (-(-(side // patch) // stride)) ** 2
    return _image_run(config, tokens, pixel_values=_pixels(3, side, side))


def _feature_map(config: Any) -> dict[str, Any]:
    """A convolutional tower (timm's): a token per cell of its last feature map."""
    from timm import create_model

    vision = config.vision_config
    side = 224  # the size such towers are trained at
    with torch.device("meta"):
        tower = create_model(vision.architecture, pretrained=False, num_classes=0)
    stride, channels = tower.feature_info[-1]["reduction"], tower.feature_info[-1]["num_chs"]
    rule = _image_run(config, (side // stride) ** 2, pixel_values=_pixels(3, side, side))
    if vision.hidden_size != channels:  # the projector takes the map's channels
        rule["config"] = {
            "vision_config": {"model_type": vision.model_type, "hidden_size": channels}
        }
    return rule


def _square(config: Any) -> dict[str, Any]:
    """A fixed-size ViT whose every patch is a token."""
    side, patch = _vision_size(config, "image_size"), _vision_size(config, "patch_size")
    return _image_run(config, (side // patch) ** 2, pixel_values=_pixels(3, side, side))


def _janus(config: Any) -> dict[str, Any]:
    rule = _square(config)
    rule["config"] = _text_width(config, "projection_dim", vision=True)
    return rule


def _kosmos2(config: Any) -> dict[str, Any]:
    """The image's latent queries fill the positions ``image_embeds_position_mask`` marks; the
    ids there are not read."""
    side = _vision_size(config, "image_size")
    return {
        "prompt": [[0, config.latent_query_num]],
        "tensors": {
            "pixel_values": _pixels(3, side, side),
            "image_embeds_position_mask": {"runs": [1], "text": 0},
        },
    }


# each family's rule: the config -> its image's placeholder runs ("prompt": [token id, count]),
# the tensors that carry the image, and "config": changes the shrunk default needs to take one
IMAGE_TEXT: dict[str, Callable[[Any], dict[str, Any]]] = {
    "aya_vision": _shuffled,
    "cohere2_vision": _shuffled,
    "deepseek_vl": _square,
    "lighton_ocr": _mistral3,
    "llava_next_video": _anyres,
    "video_llava": _video_llava,
    "fast_vlm": _feature_map,
    "idefics3": _idefics3,
    "internvl": _internvl,
    "janus": _janus,
    "kosmos-2": _kosmos2,
    "lfm2_vl": _lfm2_vl,
    "llava": _llava,
    "llava_next": _anyres,
    "llava_onevision": _anyres,
    "mistral3": _mistral3,
    "ovis2": _ovis2,
    "paligemma": _paligemma,
    "qwen2_5_vl": _qwen2_vl,
    "qwen2_vl": _qwen2_vl,
    "qwen3_vl": _qwen3_vl,
    "smolvlm": _idefics3,
    "vipllava": _vipllava,
}


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def fitted(model_type: str, diff: dict[str, Any], config: Any) -> dict[str, Any]:
    """The config ``diff`` (``config`` built from it) with what the model's inputs need: its
    family's changes and a text vocabulary that holds the image's placeholder tokens (some
    default configs put them past its end, where the released checkpoints' vocabularies
    reach)."""
    rule = IMAGE_TEXT[model_type](config)
    diff = _merged(diff, rule.get("config", {}))
    text = config.get_text_config()
    needed = max(token for token, _ in rule["prompt"]) + 1
    if needed > text.vocab_size:
        vocab = {"vocab_size": -(-needed // 64) * 64}
        if text is config:
            diff = _merged(diff, vocab)
        else:
            diff = _merged(diff, {"text_config": {"model_type": text.model_type, **vocab}})
    return diff


def _special_tokens(config: Any) -> list[int]:
    """Every token id the config names (placeholders, markers): random text leaves them out."""
    ids: set[int] = set()
    for holder in (config, config.get_text_config()):
        for key, value in holder.to_dict().items():
            if not key.endswith(("token_id", "token_index", "token_ids")):
                continue
            values = value if isinstance(value, list) else [value]
            ids.update(v for v in values if is_size(v))
    return sorted(ids)


def image_text_spec(model_type: str, config: Any) -> dict[str, Any]:
    """A vision-language model's input: its family's image run, then text up to 512 tokens
    (fewer where the text's positions end sooner)."""
    rule = IMAGE_TEXT[model_type](config)
    text = config.get_text_config()
    prompt = sum(count for _, count in rule["prompt"])
    limit = getattr(text, "max_position_embeddings", None)
    words = min(512, limit - prompt) if is_size(limit) else 512
    return {
        "main": "input_ids",
        "labels": "image-text",
        "vocab": int(text.vocab_size),
        "num_labels": 2,
        "seq_len": prompt + words,
        "prompt": rule["prompt"],
        "special": _special_tokens(config),
        "tensors": rule["tensors"],
    }


def image_text_inputs(
    spec: dict[str, Any], batch: int, train: bool, generator: torch.Generator
) -> dict[str, Any]:
    """A batch of ``image_text_spec``: each sample is the image's placeholder runs then random
    text; the image's tensors as its entries say (``shape``: random values, with ``fill``: that
    value; ``value``: these integers; ``runs``: one value over each placeholder run and
    ``text`` over the text; ``flat``: the per-sample first dimension joins the batch's)."""
    prompt = torch.cat([torch.full((count,), token) for token, count in spec["prompt"]])
    words = spec["seq_len"] - len(prompt)
    text = torch.randint(0, spec["vocab"], (batch, words), generator=generator)
    special = torch.tensor(spec["special"], dtype=torch.long)
    plain = next(i for i in range(spec["vocab"]) if i not in spec["special"])
    text = torch.where(torch.isin(text, special), plain, text)
    ids = torch.cat([prompt.expand(batch, -1), text], dim=1)
    inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    for name, entry in spec["tensors"].items():
        if "runs" in entry:
            values = [
                torch.full((count,), value)
                for (_, count), value in zip(spec["prompt"], entry["runs"], strict=True)
            ]
            row = torch.cat([*values, torch.full((words,), entry["text"])])
            inputs[name] = row.expand(batch, -1).clone()
            continue
        if "value" in entry:
            sample = torch.tensor(entry["value"], dtype=torch.long)
        elif "fill" in entry:
            sample = torch.full(entry["shape"], entry["fill"])
        else:
            sample = torch.randn(*entry["shape"], generator=generator)
        tensor = sample.unsqueeze(0).expand(batch, *sample.shape)
        inputs[name] = tensor.flatten(0, 1) if entry.get("flat") else tensor
    if train:
        labels = ids.clone()
        labels[:, : len(prompt)] = -100  # the image's positions: nothing to learn there
        inputs["labels"] = labels
    return inputs
