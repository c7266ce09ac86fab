"""Models by name: the bundled catalog, Hugging Face configs, torchvision, timm and user code.

A name resolves to a :class:`ModelRecipe`: how to build the model (on whatever device is the
default when ``build`` runs, so meta costs nothing), and how to make a batch and a loss for it.
No weights are downloaded or allocated.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from memfit._errors import InvalidInputError, MissingExtraError, UnknownModelError

__all__ = ["ModelRecipe", "catalog_entries", "resolve_model"]

_CATALOG = Path(__file__).parent / "catalog"
Batch = Any


@dataclass(frozen=True)
class ModelRecipe:
    """How to build a model and feed it. ``make_batch`` makes CPU tensors."""

    name: str
    build: Callable[[], nn.Module]
    task: str
    make_batch: Callable[[int, int | None], Batch] | None = None
    loss_fn: Callable[[nn.Module, Batch], torch.Tensor] | None = None
    default_seq_len: int | None = None
    image_size: int | None = None
    enable_checkpointing: Callable[[nn.Module], None] | None = None
    forward_fn: Callable[[nn.Module, Batch], Any] | None = None  # inference on a batch

    def describe_batch(self, batch_size: int, seq_len: int | None) -> str:
        if self.image_size:
            return f"{batch_size} x 3 x {self.image_size} x {self.image_size}"
        if seq_len:
            return f"{batch_size} x {seq_len} tokens"
        return f"batch of {batch_size}"


@cache
def catalog_entries() -> dict[str, dict[str, Any]]:
    """The bundled entries by canonical name (lowercase)."""
    entries: dict[str, dict[str, Any]] = {}
    for path in sorted(_CATALOG.glob("*.json")):
        entry = json.loads(path.read_text())
        entries[entry["name"]] = entry
    return entries


def _catalog_lookup(name: str) -> dict[str, Any] | None:
    key = name.lower()
    for entry in catalog_entries().values():
        names = [entry["name"], *entry.get("aliases", [])]
        hub = entry.get("hub_id")
        if hub:
            names += [hub.lower(), hub.lower().split("/")[-1]]
        if key in (n.lower() for n in names):
            return entry
    return None


def _require(package: str, feature: str) -> Any:
    try:
        return importlib.import_module(package)
    except ImportError as exc:
        raise MissingExtraError(package, feature, "models") from exc


# -- batches ----------------------------------------------------------------------------------
def _text_batch(vocab: int, task: str) -> Callable[[int, int | None], Batch]:
    def make(batch_size: int, seq_len: int | None) -> Batch:
        if seq_len is None:
            raise InvalidInputError("This text model needs a sequence length: pass --seq-len.")
        ids = torch.randint(0, vocab, (batch_size, seq_len))
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        batch["labels"] = ids.clone()
        return batch

    return make


def _image_batch(size: int, hf: bool, classes: int = 1000) -> Callable[[int, int | None], Batch]:
    def make(batch_size: int, seq_len: int | None) -> Batch:
        # one random image repeated: the values do not change the memory, and a large batch
        # costs no CPU time to make (moving it to a device makes it dense)
        images = torch.randn(1, 3, size, size).expand(batch_size, -1, -1, -1)
        labels = torch.randint(0, classes, (batch_size,))
        if hf:
            return {"pixel_values": images, "labels": labels}
        return (images, labels)

    return make


def classification_forward(model: nn.Module, batch: Batch) -> Any:
    """Inference on ``(images, labels)`` batches: the model sees the images only."""
    return model(batch[0])


def classification_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Cross-entropy of ``model(images)`` against labels, for ``(images, labels)`` batches."""
    images, labels = batch
    return F.cross_entropy(model(images), labels)


# -- sources ------------------------------------------------------------------------------------
_HF_TASKS = {
    "masked-lm": "AutoModelForMaskedLM",
    "causal-lm": "AutoModelForCausalLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
}


def _hf_checkpointing(model: nn.Module) -> None:
    model.gradient_checkpointing_enable(  # type: ignore[operator]
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )


def _hf_recipe(name: str, config_dict: dict[str, Any], task: str, **extra: Any) -> ModelRecipe:
    transformers = _require("transformers", "Hugging Face models")
    config_dict = dict(config_dict)
    model_type = config_dict.pop("model_type")
    for noise in ("torch_dtype", "dtype", "architectures", "transformers_version"):
        config_dict.pop(noise, None)
    config = transformers.AutoConfig.for_model(model_type, **config_dict)
    auto = getattr(transformers, _HF_TASKS[task])

    def build() -> nn.Module:
        return auto.from_config(config, dtype=torch.float32)  # type: ignore[no-any-return]

    if task == "image-classification":
        size = int(getattr(config, "image_size", 224))
        batch = _image_batch(size, hf=True, classes=int(config.num_labels))
        return ModelRecipe(name, build, task, batch, None, None, size, _hf_checkpointing)
    vocab = int(config.vocab_size)
    return ModelRecipe(
        name,
        build,
        task,
        _text_batch(vocab, task),
        None,
        extra.get("default_seq_len"),
        None,
        _hf_checkpointing,
    )


def _tv_recipe(name: str, builder: str, kwargs: dict[str, Any], size: int) -> ModelRecipe:
    models = _require("torchvision.models", "torchvision models")
    try:
        models.get_model_builder(builder)
    except ValueError as exc:
        raise _unknown(f"tv:{builder}", list(models.list_models())) from exc

    def build() -> nn.Module:
        return models.get_model(builder, weights=None, **kwargs)  # type: ignore[no-any-return]

    return _image_recipe(name, build, size, None)


def _timm_recipe(name: str, builder: str, kwargs: dict[str, Any], size: int | None) -> ModelRecipe:
    timm = _require("timm", "timm models")
    if not timm.is_model(builder):
        raise _unknown(f"timm:{builder}", list(timm.list_models()))
    if size is None:
        cfg = timm.get_pretrained_cfg(builder)
        size = int(cfg.input_size[-1]) if cfg is not None else 224

    def build() -> nn.Module:
        return timm.create_model(builder, pretrained=False, **kwargs)  # type: ignore[no-any-return]

    def checkpointing(model: nn.Module) -> None:
        model.set_grad_checkpointing(True)  # type: ignore[operator]

    return _image_recipe(name, build, size, checkpointing)


def _image_recipe(
    name: str,
    build: Callable[[], nn.Module],
    size: int,
    checkpointing: Callable[[nn.Module], None] | None,
) -> ModelRecipe:
    """An image classifier fed ``(images, labels)`` and trained with cross-entropy."""
    return ModelRecipe(
        name,
        build,
        "image-classification",
        _image_batch(size, hf=False),
        classification_loss,
        None,
        size,
        checkpointing,
        classification_forward,
    )


def _from_entry(entry: dict[str, Any]) -> ModelRecipe:
    source = entry["source"]
    if source == "hf":
        return _hf_recipe(
            entry["name"],
            entry["config"],
            entry["task"],
            default_seq_len=entry.get("default_seq_len"),
        )
    if source == "tv":
        return _tv_recipe(
            entry["name"],
            entry["builder"],
            entry.get("config", {}),
            int(entry.get("image_size", 224)),
        )
    return _timm_recipe(
        entry["name"], entry["builder"], entry.get("config", {}), entry.get("image_size")
    )


def _hf_from_hub_or_path(spec: str) -> ModelRecipe:
    entry = _catalog_lookup(spec)
    if entry is not None and entry["source"] == "hf":
        return _from_entry(entry)
    path = Path(spec)
    if path.exists():
        config_file = path / "config.json" if path.is_dir() else path
        config_dict = json.loads(config_file.read_text())
        if "model_type" not in config_dict:
            raise InvalidInputError(
                f"{config_file} has no 'model_type'; give a Hugging Face config.json."
            )
        task = _task_from_architectures(config_dict.get("architectures") or [])
        return _hf_recipe(f"hf:{spec}", config_dict, task, default_seq_len=512)
    transformers = _require("transformers", "Hugging Face models")
    try:
        config = transformers.AutoConfig.from_pretrained(spec)
    except Exception as exc:
        raise UnknownModelError(
            f"Could not get the config of 'hf:{spec}' ({type(exc).__name__}). memfit needs only "
            "the config.json, not the weights: download it and pass its path, e.g. "
            f"'hf:./{spec.split('/')[-1]}/config.json'.",
            _close(spec),
        ) from exc
    task = _task_from_architectures(getattr(config, "architectures", None) or [])
    return _hf_recipe(f"hf:{spec}", config.to_dict(), task, default_seq_len=512)


def _task_from_architectures(architectures: list[str]) -> str:
    arch = " ".join(architectures)
    if "MaskedLM" in arch or "PreTraining" in arch:
        return "masked-lm"
    if "ConditionalGeneration" in arch or "Seq2Seq" in arch:
        return "seq2seq-lm"
    if "ImageClassification" in arch:
        return "image-classification"
    return "causal-lm"


def _user_factory(spec: str) -> ModelRecipe:
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise InvalidInputError(f"File {target!r} does not exist; give 'path/to/file.py:fn'.")
        mod_name = f"memfit_user_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        if module_spec is None or module_spec.loader is None:
            raise InvalidInputError(f"Cannot import {target!r} as a Python file.")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise InvalidInputError(
                f"Cannot import module {target!r} ({exc}). Give 'package.module:fn' on the "
                "Python path, or 'path/to/file.py:fn'."
            ) from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidInputError(f"{target!r} has no callable {attr!r}; give 'module:fn'.")
    make_batch = getattr(module, "make_batch", None)
    loss_fn = getattr(module, "loss_fn", None)
    seq_len = getattr(module, "DEFAULT_SEQ_LEN", None)
    return ModelRecipe(spec, factory, "custom", make_batch, loss_fn, seq_len, None, None)


def _close(name: str) -> list[str]:
    names: list[str] = []
    for entry in catalog_entries().values():
        names += [entry["name"], *entry.get("aliases", [])]
    return difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.5)


def _unknown(spec: str, candidates: list[str]) -> UnknownModelError:
    prefix, _, bare = spec.partition(":")
    close = difflib.get_close_matches(bare, candidates, n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(f'{prefix}:{c}' for c in close)}?" if close else ""
    return UnknownModelError(f"Model {spec!r} is not known.{hint}", close)


def resolve_model(spec: str) -> ModelRecipe:
    """A recipe from a model name: catalog, ``hf:``, ``tv:``, ``timm:`` or ``file.py:fn``."""
    spec = spec.strip()
    prefix, sep, rest = spec.partition(":")
    if sep and prefix == "hf":
        return _hf_from_hub_or_path(rest)
    if sep and prefix == "tv":
        return _tv_recipe(spec, rest, {}, 224)
    if sep and prefix == "timm":
        return _timm_recipe(spec, rest, {}, None)
    if sep and rest and (prefix.endswith(".py") or "." in prefix or "/" in prefix):
        return _user_factory(spec)
    entry = _catalog_lookup(spec)
    if entry is not None:
        return _from_entry(entry)
    close = _close(spec)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownModelError(
        f"Model {spec!r} is not in memfit's catalog.{hint} Give a catalog name "
        "(memfit estimate --list-models), 'hf:org/name' or 'hf:path/to/config.json', "
        "'tv:resnet50', 'timm:convnext_tiny', or your own factory 'path/to/file.py:make_model'.",
        close,
    )
