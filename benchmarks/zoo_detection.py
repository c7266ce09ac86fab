"""The zoo's object detectors (``AutoModelForObjectDetection``): the image each family's
processor makes of a photo, the boxes a training image carries, and the config changes their
backbones need. ``zoo_hf`` builds the models and calls these for its detection head.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from zoo_shrink import VARIANTS, config_diff, shrink

# -- the image ----------------------------------------------------------------------------
#
# A COCO-like photo (480 x 640, as the zoo's torchvision detectors are given), as each family's
# image processor resizes it: the DETR-like processors to a shortest side of 800 (the longest
# kept under 1,333), RT-DETR's and its successors' to a 640 x 640 square.
# RF-DETR's windowed ViT takes squares whose patches its windows divide: the released
# checkpoints' 560 x 560. (LW-DETR's default config has no feature levels and builds no
# model: it is not taken.)

PHOTO = (480, 640)
SHORTEST, LONGEST = 800, 1333
BOXES = 4  # objects per image, as the zoo's torchvision detectors are given

RESIZED = ("conditional_detr", "dab-detr", "deformable_detr", "detr", "table-transformer", "yolos")
SQUARED = {"d_fine": 640, "deimv2": 640, "rf_detr": 560, "rt_detr": 640, "rt_detr_v2": 640}
TYPES = (*RESIZED, *SQUARED)

# the ResNet stages a timm backbone's replacement gives: the last one, or the last three where
# the model reads several feature levels (the released checkpoints' timm ``out_indices``)
MULTI_SCALE = {"deformable_detr": ["stage2", "stage3", "stage4"]}


def image_size(model_type: str) -> tuple[int, int]:
    """The (height, width) the family's processor makes of ``PHOTO``."""
    if model_type in SQUARED:
        return SQUARED[model_type], SQUARED[model_type]
    height, width = PHOTO
    scale = min(SHORTEST / min(height, width), LONGEST / max(height, width))
    return int(height * scale), int(width * scale)  # as the processors round


# -- the config ---------------------------------------------------------------------------


def fitted(model_type: str, diff: dict[str, Any], config: Any) -> dict[str, Any]:
    """The config ``diff`` (``config`` built from it) with a transformers backbone where the
    default is timm's: a ResNet-50 (the released checkpoints' backbone, built by transformers
    rather than by timm), shrunk as the zoo shrinks a sub-config, and never pretrained."""
    backbone = getattr(config, "backbone_config", None)
    if backbone is None:
        return diff
    if backbone.model_type != "timm_backbone":
        return _whole_backbone(model_type, diff)
    from transformers import ResNetConfig

    stages = MULTI_SCALE.get(model_type, ["stage4"])
    default = ResNetConfig().to_dict()
    resnet = shrink(ResNetConfig(out_features=stages).to_dict(), VARIANTS[0])
    out = copy.deepcopy(diff)
    out["backbone_config"] = {**config_diff(default, resnet), "model_type": "resnet"}
    out["use_pretrained_backbone"] = False
    return out


def _whole_backbone(model_type: str, diff: dict[str, Any]) -> dict[str, Any]:
    """The shrunk backbone's changes counted from the backbone's own default, not from the
    detector's: a sub-config is rebuilt from its class's defaults, and the feature levels the
    detector's default asks of it (``out_features``) would otherwise be lost."""
    from transformers import CONFIG_MAPPING

    changes = diff.get("backbone_config")
    if not changes:
        return diff
    default = CONFIG_MAPPING[model_type]().backbone_config
    own = type(default)().to_dict()
    values = {**default.to_dict(), **changes}
    out = copy.deepcopy(diff)
    out["backbone_config"] = {**config_diff(own, values), "model_type": default.model_type}
    return out


# -- the batch ----------------------------------------------------------------------------


def detection_spec(model_type: str, config: Any) -> dict[str, Any]:
    """A detector's input: the processed photo, and ``BOXES`` labelled boxes per image in
    training (the cap of its batch is the zoo's detectors')."""
    height, width = image_size(model_type)
    channels = int(getattr(config, "num_channels", None) or 3)
    return {
        "main": "pixel_values",
        "labels": "detection",
        "kind": "detection",
        "shape": [channels, height, width],
        "boxes": BOXES,
        "vocab": 256,
        "num_labels": int(config.num_labels),
    }


def detection_labels(spec: dict[str, Any], batch: int, generator: torch.Generator) -> list[Any]:
    """Per image, ``boxes`` objects of random classes, each box (centre x, centre y, width,
    height) in fractions of the image, as the processors give them: inside the image, between
    5% and 40% of its side."""
    labels = []
    for _ in range(batch):
        n = spec["boxes"]
        size = 0.05 + 0.35 * torch.rand(n, 2, generator=generator)
        centre = size / 2 + (1 - size) * torch.rand(n, 2, generator=generator)
        labels.append(
            {
                "class_labels": torch.randint(0, spec["num_labels"], (n,), generator=generator),
                "boxes": torch.cat([centre, size], dim=1),
            }
        )
    return labels
