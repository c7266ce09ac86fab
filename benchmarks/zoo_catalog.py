"""The zoo's torchvision and timm models, built from their code's defaults (never a download).

torchvision: every model ``torchvision.models.list_models()`` names. Classification models (and
the quantizable ones, built with ``quantize=False``: float models with quantization stubs) go
through memfit's own ``tv:NAME``; detection, segmentation, video and optical-flow models take
inputs memfit does not make, so the sweep makes them (``zoo_inputs.py``) and builds the models
with ``weights=None, weights_backbone=None``.

timm: one model per family, the smallest registered model of the family by parameter count
(timm's ``test_*`` models, made for timm's own unit tests, left out), through memfit's own
``timm:NAME`` at its default resolution. A family is a timm module and the leading letters of the
model's name (after a ``tf_``, ``legacy_`` or ``gluon_`` prefix): ``resnet/seresnext``,
``byobnet/repvgg``, ``vision_transformer/vit``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["TV_TASKS", "timm_entries", "timm_family", "torchvision_entries"]

# torchvision tasks whose inputs the sweep makes, with each input's shape per sample
TV_TASKS = ("detection", "segmentation", "video", "optical_flow")
DETECTION_IMAGE = [3, 480, 640]  # a COCO-like photo; the models resize it themselves
SEGMENTATION_IMAGE = [3, 520, 520]  # torchvision's reference crop
FLOW_IMAGE = [3, 368, 496]  # RAFT's FlyingChairs crop
VIDEO_CLIP = {"r3d_18": 112, "mc3_18": 112, "r2plus1d_18": 112}  # frame size, else 224
VIDEO_FRAMES = 16


def _tv_group(name: str) -> str:
    import torchvision.models as models

    for task in (*TV_TASKS, "quantization"):
        if name in models.list_models(module=getattr(models, task)):
            return task
    return "classification"


def _tv_input(name: str, group: str) -> dict[str, Any]:
    if group == "detection":
        size = 320 if "320" in name else 300 if name.startswith("ssd300") else None
        spec: dict[str, Any] = {"kind": "detection", "image": DETECTION_IMAGE, "boxes": 4}
        if size:
            spec["resized_to"] = size
        if name.startswith("maskrcnn"):
            spec["masks"] = True
        if name.startswith("keypointrcnn"):
            spec["keypoints"] = 17
        return spec
    if group == "segmentation":
        return {"kind": "segmentation", "image": SEGMENTATION_IMAGE, "classes": 21}
    if group == "video":
        side = VIDEO_CLIP.get(name, 224)
        return {"kind": "video", "clip": [3, VIDEO_FRAMES, side, side], "classes": 400}
    if group == "optical_flow":
        return {"kind": "optical_flow", "image": FLOW_IMAGE}
    return {"kind": "memfit", "image": [3, 224, 224], "classes": 1000}


def torchvision_entries() -> list[dict[str, Any]]:
    """Every torchvision model: memfit's ``tv:`` where it knows the input, else the sweep's."""
    import torchvision.models as models

    entries = []
    for name in sorted(models.list_models()):
        group = _tv_group(name)
        entry: dict[str, Any] = {
            "id": f"tv:{name}",
            "source": "torchvision",
            "group": group,
            "seed": 0,
            "input": _tv_input(name, group),
        }
        kwargs: dict[str, Any] = {"weights": None}
        if group in ("detection", "segmentation"):
            kwargs["weights_backbone"] = None  # else the builder downloads the backbone's
        if group in TV_TASKS:
            entry["build"] = {"kind": "torchvision", "builder": name, "kwargs": kwargs}
        else:
            entry["build"] = {"kind": "memfit", "model": f"tv:{name}"}
        entry["params"] = _params(lambda name=name, kw=kwargs: models.get_model(name, **kw))
        entries.append(entry)
    return entries


def _params(build: Callable[[], torch.nn.Module]) -> int | None:
    """Parameters of the model built on meta (None where it cannot be built there)."""
    try:
        with torch.device("meta"):
            model = build()
    except Exception:  # a build that reads values on meta: counted on the CPU
        try:
            model = build()
        except Exception:
            return None
    return sum(p.numel() for p in model.parameters())


def timm_family(name: str, module: str) -> str:
    """The family of a timm model: its module and the leading letters of its name."""
    base = name
    for prefix in ("tf_", "legacy_", "gluon_"):
        base = base.removeprefix(prefix)
    return f"{module}/{re.split(r'[_0-9]', base)[0] or base}"


def timm_entries(progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The smallest model of each timm family, by parameter count (ties: by name)."""
    import timm
    from timm.models import get_pretrained_cfg

    modules = {
        name: module for module in timm.list_modules() for name in timm.list_models(module=module)
    }
    families: dict[str, list[tuple[int, str]]] = {}
    unbuilt: dict[str, str] = {}
    for name in sorted(timm.list_models()):
        if name.startswith("test_"):
            continue
        family = timm_family(name, modules.get(name, "?"))
        params = _params(lambda name=name: timm.create_model(name, pretrained=False))
        if params is None:
            unbuilt.setdefault(family, name)
            continue
        families.setdefault(family, []).append((params, name))
    entries = []
    for family in sorted(set(families) | set(unbuilt)):
        if family not in families:
            progress(f"timm {family}: no model builds (e.g. {unbuilt[family]})")
            entries.append(
                {
                    "id": f"timm:{unbuilt[family]}",
                    "source": "timm",
                    "group": family,
                    "seed": 0,
                    "error": {"phase": "build", "message": "no model of the family builds"},
                }
            )
            continue
        params, name = min(families[family])
        cfg = get_pretrained_cfg(name)
        size = list(cfg.input_size) if cfg is not None else [3, 224, 224]
        entries.append(
            {
                "id": f"timm:{name}",
                "source": "timm",
                "group": family,
                "seed": 0,
                "params": params,
                "family_size": len(families[family]),
                "build": {"kind": "memfit", "model": f"timm:{name}"},
                "input": {"kind": "memfit", "image": size, "classes": 1000},
            }
        )
    return entries
