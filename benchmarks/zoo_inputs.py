"""From a zoo entry to memfit's workload: the same model, batch, loss and step on the CPU (the
estimate) and on the GPU (the measurement).

An entry's ``build`` says how to make the model:

- ``memfit``: a name memfit resolves itself (``tv:resnet50``, ``timm:convnext_atto``), with its
  own batches and loss;
- ``transformers``: a model type, a head and its config. Where memfit knows the head (causal,
  masked and seq2seq LM, image classification) the config is written to a ``config.json`` and
  given as ``hf:PATH`` with the architecture of the head, as a user would; other heads are a
  factory with the batch the head needs (``zoo_hf.make_inputs``) and the output's ``loss``;
- ``torchvision``: a torchvision builder with keyword arguments, for the tasks whose inputs
  memfit does not make (detection, segmentation, video, optical flow).

Training is bf16-mixed with AdamW, two steps; inference is bf16 (parameters and floating inputs
in bfloat16), one forward under ``torch.no_grad``: memfit's own loop in both.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from zoo_hf import HEAD_BY_TASK, build_config, build_hf_model, head_loss, make_inputs

__all__ = ["MEMFIT_HF_TASKS", "MODES", "config_file", "workload_for"]

MODES = {
    "train": {"precision": "bf16-mixed", "optimizer": "adamw", "mode": "train"},
    "infer": {"precision": "bf16", "mode": "infer"},
}
MEMFIT_HF_TASKS = ("causal-lm", "masked-lm", "seq2seq-lm", "image-classification")


def _generator(entry: dict[str, Any], batch: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(entry.get("seed", 0)) * 1_000_003 + batch)


# -- transformers configs as files -----------------------------------------------------------------


def config_file(entry: dict[str, Any]) -> Path:
    """The entry's config as a ``config.json`` naming the head's architecture, written once
    under the temporary directory (by content, so a changed config is a new file)."""
    build = entry["build"]
    values = build_config(build["model_type"], build["config"]).to_dict()
    values["architectures"] = [entry["head_class"]]
    text = json.dumps(values, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "memfit-zoo-configs" / f"{build['model_type']}-{digest}"
    path = folder / "config.json"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"config.json.{os.getpid()}"
        partial.write_text(text)
        partial.replace(path)
    return path


# -- torchvision tasks memfit makes no batch for ------------------------------------------------


def _images(count: int, shape: list[int], gen: torch.Generator, dtype: torch.dtype) -> list[Any]:
    return [torch.rand(*shape, generator=gen).to(dtype) for _ in range(count)]


def _detection_targets(spec: dict[str, Any], count: int, gen: torch.Generator) -> list[Any]:
    _, height, width = spec["image"]
    targets = []
    for _ in range(count):
        n = spec["boxes"]
        corner = torch.rand(n, 2, generator=gen) * torch.tensor([width * 0.6, height * 0.6])
        extent = 32 + torch.rand(n, 2, generator=gen) * torch.tensor([width * 0.3, height * 0.3])
        target: dict[str, Any] = {
            "boxes": torch.cat([corner, corner + extent], dim=1),
            "labels": torch.randint(1, 91, (n,), generator=gen),
        }
        if spec.get("masks"):
            masks = torch.zeros(n, height, width, dtype=torch.uint8)
            for i, (x0, y0, x1, y1) in enumerate(target["boxes"].int().tolist()):
                masks[i, y0:y1, x0:x1] = 1
            target["masks"] = masks
        if spec.get("keypoints"):
            points = (
                corner[:, None, :]
                + torch.rand(n, spec["keypoints"], 2, generator=gen) * (extent[:, None, :])
            )
            target["keypoints"] = torch.cat([points, torch.ones(n, spec["keypoints"], 1)], dim=2)
        targets.append(target)
    return targets


def _tv_batch_of(
    spec: dict[str, Any], entry: dict[str, Any], train: bool, dtype: torch.dtype
) -> Callable[[int], Any]:
    kind = spec["kind"]

    def make(n: int) -> Any:
        gen = _generator(entry, n)
        if kind == "detection":  # a list of images (and targets): memfit does not cast inside
            images = _images(n, spec["image"], gen, torch.float32 if train else dtype)
            return (images, _detection_targets(spec, n, gen)) if train else (images,)
        if kind == "segmentation":
            images = torch.rand(n, *spec["image"], generator=gen)
            masks = torch.randint(0, spec["classes"], (n, *spec["image"][1:]), generator=gen)
            return (images, masks) if train else (images,)
        if kind == "video":
            clips = torch.rand(n, *spec["clip"], generator=gen)
            labels = torch.randint(0, spec["classes"], (n,), generator=gen)
            return (clips, labels) if train else (clips,)
        first = torch.rand(n, *spec["image"], generator=gen)
        second = torch.rand(n, *spec["image"], generator=gen)
        if not train:
            return (first, second)
        flow = torch.randn(n, 2, *spec["image"][1:], generator=gen)
        return (first, second, flow)

    return make


def _tv_loss(kind: str) -> Callable[[nn.Module, Any], torch.Tensor]:
    """The task's training loss, as torchvision's reference scripts compute it."""

    def detection(model: nn.Module, batch: Any) -> torch.Tensor:
        losses = model(*batch)
        return sum(losses.values())  # type: ignore[no-any-return]

    def segmentation(model: nn.Module, batch: Any) -> torch.Tensor:
        images, masks = batch
        out = model(images)
        loss = F.cross_entropy(out["out"], masks)
        return loss + 0.5 * F.cross_entropy(out["aux"], masks) if "aux" in out else loss

    def video(model: nn.Module, batch: Any) -> torch.Tensor:
        clips, labels = batch
        return F.cross_entropy(model(clips), labels)

    def optical_flow(model: nn.Module, batch: Any) -> torch.Tensor:
        first, second, flow = batch
        predictions = model(first, second)
        weights = [0.8 ** (len(predictions) - i - 1) for i in range(len(predictions))]
        terms = zip(weights, predictions, strict=True)
        return sum(w * (p - flow).abs().mean() for w, p in terms)  # type: ignore[return-value]

    return {
        "detection": detection,
        "segmentation": segmentation,
        "video": video,
        "optical_flow": optical_flow,
    }[kind]


def _tv_factory(build: dict[str, Any]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import torchvision.models as models

        return models.get_model(build["builder"], **build["kwargs"])  # type: ignore[no-any-return]

    make.__name__ = build["builder"]
    return make


# -- the workload -------------------------------------------------------------------------------


def workload_for(entry: dict[str, Any], mode: str, batch_size: int, gpu: Any = None) -> Any:
    """memfit's workload of ``entry`` in ``mode`` (``train`` or ``infer``) at ``batch_size``."""
    from memfit.workload import make_workload

    settings: dict[str, Any] = {**MODES[mode], "batch_size": batch_size}
    if gpu is not None:
        settings["gpu"] = gpu
    build = entry["build"]
    train = mode == "train"
    dtype = torch.float32 if train else torch.bfloat16
    if build["kind"] == "memfit":
        return make_workload(build["model"], seq_len=_seq_len(entry), **settings)
    if build["kind"] == "transformers" and build.get("via") == "memfit":
        spec = f"hf:{config_file(entry)}"
        return make_workload(spec, seq_len=_seq_len(entry), **settings)
    if build["kind"] == "transformers":
        head = HEAD_BY_TASK[build["task"]]
        values = build["config"]
        model_type = build["model_type"]

        def factory() -> nn.Module:
            return build_hf_model(model_type, head.task, values)

        factory.__name__ = entry["head_class"]
        spec = entry["input"]

        def batch_of(n: int) -> Any:
            return make_inputs(spec, n, train, _generator(entry, n))

        loss = head_loss(head.labels) if train else None
        if loss is not None:
            settings["loss_fn"] = loss
        return make_workload(factory, batch_of=batch_of, **settings)
    kind = entry["input"]["kind"]
    if train:
        settings["loss_fn"] = _tv_loss(kind)
    return make_workload(
        _tv_factory(build), batch_of=_tv_batch_of(entry["input"], entry, train, dtype), **settings
    )


def _seq_len(entry: dict[str, Any]) -> int | None:
    spec = entry.get("input", {})
    return spec.get("seq_len") if spec.get("main") == "input_ids" else None
