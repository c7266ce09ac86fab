"""The zoo's mask models: universal segmentation (``AutoModelForUniversalSegmentation``:
MaskFormer, Mask2Former, OneFormer, EoMT) trained on each image's segments (a binary mask and a
class per segment), and promptable mask generation (``AutoModelForMaskGeneration``: the SAM
family) prompted with a box per image and trained on its mask. ``zoo_hf`` builds the models and
calls these for its two heads.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from zoo_detection import image_size as detr_image_size

# -- universal segmentation ---------------------------------------------------------------
#
# The photo (480 x 640) as each family's image processor makes it: MaskFormer's, Mask2Former's
# and OneFormer's resize it to a shortest side of 800 (Mask2Former's and MaskFormer's then pad
# it to a multiple of 32: 800 x 1088); EoMT's released checkpoints' processors resize its
# longest side to 640 and pad it to the 640 x 640 square their ViT was trained on.

UNIVERSAL = ("eomt", "eomt_dinov3", "mask2former", "maskformer", "oneformer")
PADDED = {"mask2former": 32, "maskformer": 32}  # the processor's size_divisor
SQUARED = {"eomt": 640, "eomt_dinov3": 640}
SEGMENTS = 8  # things and stuff per image, each a binary mask with its class


def universal_image_size(model_type: str) -> tuple[int, int]:
    if model_type in SQUARED:
        return SQUARED[model_type], SQUARED[model_type]
    height, width = detr_image_size("detr")  # shortest side 800, longest kept under 1,333
    divisor = PADDED.get(model_type, 1)
    return -(-height // divisor) * divisor, -(-width // divisor) * divisor


def universal_spec(model_type: str, config: Any) -> dict[str, Any]:
    """The processed photo and, in training, ``SEGMENTS`` segments per image. OneFormer is also
    given its task's tokens (``task_inputs``, as its processor tokenizes "the task is panoptic")
    and, as its processor gives them for training (``num_text``: its queries less its text
    context), the texts of its contrastive loss (``text_inputs``)."""
    height, width = universal_image_size(model_type)
    channels = int(getattr(config, "num_channels", None) or 3)
    spec: dict[str, Any] = {
        "main": "pixel_values",
        "labels": "segments",
        "kind": "segmentation",
        "shape": [channels, height, width],
        "segments": SEGMENTS,
        "vocab": 256,
        "num_labels": int(config.num_labels),
    }
    if model_type == "oneformer":
        spec["task_tokens"] = int(config.task_seq_len)
        spec["task_vocab"] = int(config.text_encoder_vocab_size)
        spec["texts"] = int(config.num_queries) - int(config.text_encoder_n_ctx)
        spec["text_tokens"] = int(config.text_encoder_context_length)
    return spec


def _boxes(count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` boxes (x0, y0, x1, y1) in fractions of the image, 5% to 40% of its side."""
    size = 0.05 + 0.35 * torch.rand(count, 2, generator=generator)
    corner = (1 - size) * torch.rand(count, 2, generator=generator)
    return torch.cat([corner, corner + size], dim=1)


def _masks(boxes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """A float mask (1 inside, 0 outside) per box, at the image's size."""
    masks = torch.zeros(len(boxes), height, width)
    scale = torch.tensor([width, height, width, height])
    for i, (x0, y0, x1, y1) in enumerate((boxes * scale).int().tolist()):
        masks[i, y0:y1, x0:x1] = 1
    return masks


def universal_inputs(
    spec: dict[str, Any], batch: int, train: bool, generator: torch.Generator
) -> dict[str, Any]:
    """The images (one random sample repeated) and, in training, per image its segments'
    masks (``mask_labels``, float, at the image's size, as the processors give them) and
    classes (``class_labels``). OneFormer's texts are given in inference too: a config that
    trains the text mapper (``is_training``) runs it in every forward."""
    sample = torch.randn(1, *spec["shape"], generator=generator)
    inputs: dict[str, Any] = {"pixel_values": sample.expand(batch, *spec["shape"])}
    if "task_tokens" in spec:
        shape = (batch, spec["task_tokens"])
        inputs["task_inputs"] = torch.randint(0, spec["task_vocab"], shape, generator=generator)
        shape = (batch, spec["texts"], spec["text_tokens"])
        inputs["text_inputs"] = torch.randint(0, spec["task_vocab"], shape, generator=generator)
    if train:
        height, width = spec["shape"][-2:]
        n = spec["segments"]
        inputs["mask_labels"] = [_masks(_boxes(n, generator), height, width) for _ in range(batch)]
        inputs["class_labels"] = [
            torch.randint(0, spec["num_labels"], (n,), generator=generator) for _ in range(batch)
        ]
    return inputs


# -- mask generation ----------------------------------------------------------------------
#
# The photo as the SAM processors make it: its longest side resized to 1,024 and padded to a
# 1,024 x 1,024 square (SAM, SAM-HQ), or resized to the square (SAM 2: 1,024; SAM 3: 1,008).
# One box prompt per image. The model predicts a low-resolution mask, 256 x 256 (SAM 3's 288 x
# 288, four times its ViT's 72 x 72 patches): the target mask is given at that size, as the SAM
# fine-tuning recipes resize the ground truth to the prediction (SAM 3's processor makes its
# masks 288 x 288).

MASK_GENERATION = ("sam", "sam2", "sam3_tracker", "sam_hq")
PROMPTED_SIDE = {"sam": 1024, "sam_hq": 1024, "sam2": 1024, "sam3_tracker": 1008}
MASK_SIDE = {"sam": 256, "sam_hq": 256, "sam2": 256, "sam3_tracker": 288}
TARGET = "target"  # the batch's key for the target mask, which the model is not given


def mask_generation_spec(model_type: str, config: Any) -> dict[str, Any]:
    side = PROMPTED_SIDE[model_type]
    return {
        "main": "pixel_values",
        "labels": "prompt-mask",
        "kind": "segmentation",
        "shape": [3, side, side],
        "target": [MASK_SIDE[model_type], MASK_SIDE[model_type]],
        "vocab": 256,
        "num_labels": 2,
    }


def mask_generation_inputs(
    spec: dict[str, Any], batch: int, train: bool, generator: torch.Generator
) -> dict[str, Any]:
    """The images (one random sample repeated), a box per image (``input_boxes``, pixels of
    the processed image, shape batch x 1 x 4); in training one mask per box is predicted
    (``multimask_output=False``) against the batch's target mask. Inference asks the model's
    default (three masks per prompt)."""
    sample = torch.randn(1, *spec["shape"], generator=generator)
    side = spec["shape"][-1]
    boxes = _boxes(batch, generator) * side
    inputs: dict[str, Any] = {
        "pixel_values": sample.expand(batch, *spec["shape"]),
        "input_boxes": boxes[:, None, :],
    }
    if train:
        inputs["multimask_output"] = False
        target = torch.stack([_masks(_boxes(1, generator), *spec["target"]) for _ in range(batch)])
        inputs[TARGET] = target  # batch x 1 x h x w
    return inputs


def mask_loss(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """The SAM fine-tuning loss (as the recipes' ``DiceCELoss(sigmoid=True)``): binary cross-
    entropy plus the soft Dice loss of the predicted mask's logits against the target mask."""
    inputs = {k: v for k, v in batch.items() if k != TARGET}
    target = batch[TARGET].float()
    logits = model(**inputs).pred_masks.squeeze(1).float()  # batch x 1 x h x w
    if logits.shape[-2:] != target.shape[-2:]:
        logits = F.interpolate(logits, size=target.shape[-2:], mode="bilinear")
    bce = F.binary_cross_entropy_with_logits(logits, target)
    probs = logits.sigmoid()
    overlap = (probs * target).sum(dim=(-2, -1))
    total = probs.sum(dim=(-2, -1)) + target.sum(dim=(-2, -1))
    dice = 1 - (2 * overlap + 1e-5) / (total + 1e-5)
    return bce + dice.mean()


def head_loss(labels: str) -> Callable[[nn.Module, dict[str, Any]], torch.Tensor] | None:
    return mask_loss if labels == "prompt-mask" else None


# -- the config ---------------------------------------------------------------------------


def fitted(model_type: str, diff: dict[str, Any]) -> dict[str, Any]:
    """The shrunk config with what the shrink leaves inconsistent put back, and OneFormer's
    made for training (``is_training``: its loss always has the contrastive term, which needs
    the text mapper that only that setting builds):

    - EoMT adds its queries for its last ``num_blocks`` layers (4 of 24): with 2 layers left,
      the last one takes them (a layer without queries and one with, as the shrink keeps one
      of each kind of layer);
    - the shrunk ViT of SAM, SAM-HQ and SAM 3 keeps a global-attention layer: the shrink cuts
      the depth to 2 but leaves the global layers' indices (the 3rd, 6th ...) past it, which
      would leave every layer windowed (SAM-HQ reads the first global layer's output and would
      not run); the last layer is made the global one;
    - SAM-HQ's mask decoder reads the ViT's features at the ViT's width (``vit_dim``)."""
    out = copy.deepcopy(diff)
    if model_type == "oneformer":
        out["is_training"] = True
    if model_type in ("eomt", "eomt_dinov3") and "num_hidden_layers" in out:
        out["num_blocks"] = 1
    vision = out.get("vision_config") or {}
    if model_type == "sam3_tracker":
        vision = vision.get("backbone_config") or {}
    if model_type in ("sam", "sam_hq", "sam3_tracker") and "num_hidden_layers" in vision:
        vision["global_attn_indexes"] = [vision["num_hidden_layers"] - 1]
    if model_type == "sam_hq" and "hidden_size" in vision:
        out.setdefault("mask_decoder_config", {})["vit_dim"] = vision["hidden_size"]
    return out
