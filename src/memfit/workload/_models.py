"""Models by name: the bundled catalog, Hugging Face configs, torchvision, timm and user code.

A name resolves to a :class:`ModelRecipe`: how to build the model (on whatever device is the
default when ``build`` runs, so meta costs nothing), and how to make a batch and a loss for it.
No weights are downloaded or allocated.
"""

from __future__ import annotations

import copy
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
from memfit.workload._hub import hub_offline
from memfit.workload._user import checked_factory, user_code_error, wrap_user

__all__ = ["TEXT_TASKS", "ModelRecipe", "catalog_entries", "resolve_model"]

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
    max_positions: int | None = None  # the longest sequence the config is made for
    positions_hard: bool = False  # a learned position table: longer sequences cannot run
    vocab_size: int | None = None  # text models: the logits' width
    step_fn: Callable[..., Any] | None = None  # the user's whole step (a file's ``step``)
    optimizer: Callable[[nn.Module], Any] | None = None  # a file's make_optimizer(model)

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
    """Cross-entropy of ``model(images)`` against labels, for ``(images, labels)`` batches.

    A model that returns its auxiliary classifiers' logits beside its own in training
    (torchvision's GoogLeNet and Inception-v3, a named tuple) is trained on each of them, as
    their papers train them: each head's activations are kept for the backward."""
    images, labels = batch
    out = model(images)
    if isinstance(out, tuple):
        heads = [t for t in out if isinstance(t, torch.Tensor)]
        return sum(
            (F.cross_entropy(t, labels) for t in heads[1:]), F.cross_entropy(heads[0], labels)
        )
    return F.cross_entropy(out, labels)


TEXT_TASKS = ("masked-lm", "causal-lm", "seq2seq-lm")


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
    source = extra.get("config_file") or name
    _check_config_sizes(config_dict, source)
    model_type = config_dict.pop("model_type")
    _check_model_type(transformers, model_type, source)
    for noise in ("torch_dtype", "dtype", "architectures", "transformers_version"):
        config_dict.pop(noise, None)
    try:
        config = transformers.AutoConfig.for_model(model_type, **config_dict)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidInputError(
            f"{source}: transformers {transformers.__version__} cannot make a config of it "
            f"(model_type {model_type!r}): {_first_line(exc)}. Fix the config.json (a "
            "model_type transformers knows, e.g. 'gpt2' or 'llama'), or upgrade transformers."
        ) from exc
    auto = getattr(transformers, _HF_TASKS[task])

    def build() -> nn.Module:
        # each model its own config: transformers keeps the one it is given, and a model
        # checkpointed once sets its use_cache to False, which took GPT-2's KV cache (300 MB at
        # 8 x 1024) out of every later build's step (the planner's candidates after a
        # checkpointed one; found on an H200, benchmarks/results/2026-12-03-h200-host-costs)
        fresh = copy.deepcopy(config)
        return auto.from_config(fresh, dtype=torch.float32)  # type: ignore[no-any-return]

    if extra.get("config_file"):
        build = _config_build(build, source)

    if task == "image-classification":
        size = int(getattr(config, "image_size", 224))
        batch = _image_batch(size, hf=True, classes=int(config.num_labels))
        return ModelRecipe(name, build, task, batch, None, None, size, _hf_checkpointing)
    vocab = int(config.vocab_size)
    limit, hard = _positions(config)
    return ModelRecipe(
        name,
        build,
        task,
        _text_batch(vocab, task),
        None,
        extra.get("default_seq_len"),
        None,
        _hf_checkpointing,
        max_positions=limit,
        positions_hard=hard,
        vocab_size=vocab,
    )


def _positions(config: Any) -> tuple[int | None, bool]:
    """The longest sequence a Hugging Face config is made for, and whether it is a hard limit
    (a learned position table) or not (rotary or relative positions extrapolate)."""
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if not isinstance(limit, int) or limit < 1:
        return None, False
    values = config.to_dict()
    soft = (
        any(
            values.get(k) is not None
            for k in ("rope_parameters", "rope_theta", "rope_scaling", "rotary_dim", "rotary_pct")
        )
        or values.get("relative_attention_num_buckets") is not None
    )
    if "roberta" in str(values.get("model_type", "")):
        limit -= 2  # position ids start after the padding index
    return limit, not soft


def _check_model_type(transformers: Any, model_type: object, source: str) -> None:
    """A ``model_type`` this transformers does not know, named with up to five close ones and
    how to list them all (transformers' own error lists every type it knows, 800 and more)."""
    known = transformers.CONFIG_MAPPING
    if isinstance(model_type, str) and model_type in known:
        return
    close = (
        difflib.get_close_matches(model_type, list(known.keys()), n=5, cutoff=0.6)
        if isinstance(model_type, str)
        else []
    )
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise InvalidInputError(
        f"{source}: transformers {transformers.__version__} does not know model_type "
        f"{model_type!r}.{hint} Fix model_type in the config.json; for a model newer than "
        "this transformers, upgrade it (pip install -U transformers). The types it knows: "
        'python -c "from transformers import CONFIG_MAPPING; print(*sorted(CONFIG_MAPPING))"'
    )


_LONGEST_LINE = 300  # of a library's message quoted in one of memfit's


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, cut to a few hundred characters (some libraries
    put whole lists on it)."""
    text = str(exc).strip()
    line = text.splitlines()[0].rstrip(".") if text else type(exc).__name__
    return line if len(line) <= _LONGEST_LINE else line[: _LONGEST_LINE - 3].rstrip() + "..."


_SIZE_KEY = ("size", "dim", "layers", "heads", "positions", "embd", "n_ctx", "n_inner", "labels")


def _check_config_sizes(config: dict[str, Any], source: str) -> None:
    """A negative size (or no attention heads) in a config fails deep in the model's
    constructor; name the key and the file instead."""
    for key, value in config.items():
        if isinstance(value, bool) or not isinstance(value, int) or "token" in key:
            continue
        if not any(part in key for part in _SIZE_KEY):
            continue
        if value < 0 or (value == 0 and "heads" in key):
            raise InvalidInputError(
                f"{source}: {key}={value} is not a size a model can have; give a positive "
                f"{key} in the config."
            )


def _config_build(build: Callable[[], nn.Module], source: str) -> Callable[[], nn.Module]:
    """A model built from a user's config: a config transformers cannot build from is named."""

    def checked() -> nn.Module:
        try:
            return build()
        except MemoryError:
            raise
        except Exception as exc:
            if "meta" in str(exc).lower():
                raise
            raise InvalidInputError(
                f"{source}: the model cannot be built from this config "
                f"({type(exc).__name__}: {_first_line(exc)}). Fix the config.json."
            ) from exc

    return checked


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
        config_dict = _read_config(config_file, path)
        task = _task_from_architectures(config_dict.get("architectures") or [])
        return _hf_recipe(
            f"hf:{spec}", config_dict, task, default_seq_len=512, config_file=str(config_file)
        )
    if spec.startswith((".", "/", "~")) or spec.endswith(".json") or spec.count("/") > 1:
        raise InvalidInputError(
            f"hf:{spec}: no such file or folder. Give the path of a Hugging Face config.json "
            "(or of its folder), or a hub id 'hf:org/name'."
        )
    transformers = _require("transformers", "Hugging Face models")
    offline = hub_offline()
    try:
        config = transformers.AutoConfig.from_pretrained(spec, local_files_only=bool(offline))
    except Exception as exc:
        if offline:
            raise InvalidInputError(
                f"hf:{spec}: no network ({offline}) and its config is not in the local Hugging "
                "Face cache. Give a local config (hf:path/to/config.json) or a catalog name "
                "(memfit estimate --list-models)."
            ) from exc
        raise UnknownModelError(
            f"Could not get the config of 'hf:{spec}' ({type(exc).__name__}). memfit needs only "
            "the config.json, not the weights: download it and pass its path, e.g. "
            f"'hf:./{spec.split('/')[-1]}/config.json'.",
            _close(spec),
        ) from exc
    task = _task_from_architectures(getattr(config, "architectures", None) or [])
    return _hf_recipe(f"hf:{spec}", config.to_dict(), task, default_seq_len=512)


def _read_config(config_file: Path, given: Path) -> dict[str, Any]:
    """The config.json's dictionary; a missing, unreadable or malformed file is named."""
    if not config_file.is_file():
        raise InvalidInputError(
            f"hf:{given}: the folder has no config.json. Give the folder of a Hugging Face "
            "model (with its config.json) or the config file itself: hf:path/to/config.json."
        )
    try:
        config = json.loads(config_file.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{config_file} is not valid JSON ({exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}): fix it, or download the model's config.json again."
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{config_file} cannot be read ({exc}).") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise InvalidInputError(
            f"{config_file} has no 'model_type'; give a Hugging Face config.json."
        )
    return config


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
    """A recipe from ``module:fn`` or ``path/to/file.py:fn`` and what it defines beside ``fn``
    (``make_batch``, ``loss_fn`` or ``step`` with ``make_optimizer``, ``DEFAULT_SEQ_LEN``)."""
    target, _, attr = spec.rpartition(":")
    module = _import_user_module(target)
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise InvalidInputError(f"{target!r} has no callable {attr!r}; give 'module:fn'.")
    make_batch = _optional_function(
        module, target, "make_batch", "make_batch(batch_size, seq_len) returning the batch"
    )
    if make_batch is not None:
        make_batch = wrap_user(make_batch, f"make_batch() of {target}")
    loss_fn = _optional_function(
        module, target, "loss_fn", "loss_fn(model, batch) returning the loss tensor"
    )
    seq_len = getattr(module, "DEFAULT_SEQ_LEN", None)
    step_fn = _optional_function(module, target, "step", "step(model, batch, optimizer)")
    optimizer = _optional_function(
        module, target, "make_optimizer", "make_optimizer(model) returning the optimizer(s)"
    )
    if optimizer is not None and step_fn is None:
        raise InvalidInputError(
            f"{target} defines make_optimizer but no step: make_optimizer(model) makes the "
            "optimizer(s) a step function is given. Define step(model, batch, optimizer) "
            "too, or remove make_optimizer and choose one with --optimizer."
        )
    if step_fn is not None and loss_fn is not None:
        raise InvalidInputError(
            f"{target} defines both step and loss_fn: the step computes its own loss, so "
            "loss_fn would be ignored. Remove one of them."
        )
    build = checked_factory(factory, f"{attr}() of {target}")
    return ModelRecipe(
        spec,
        build,
        "custom",
        make_batch,
        loss_fn,
        seq_len,
        None,
        None,
        step_fn=step_fn,
        optimizer=optimizer,
    )


def _import_user_module(target: str) -> Any:
    """The user's module: imported by name, or executed from its file; what it raises at
    import is reported as theirs."""
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
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[mod_name]
            raise user_code_error(f"{target}, at import", exc, str(path)) from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise InvalidInputError(
                f"Cannot import module {target!r} ({exc}). Give 'package.module:fn' on the "
                "Python path, or 'path/to/file.py:fn'."
            ) from exc
        except Exception as exc:
            raise user_code_error(f"module {target}, at import", exc, None) from exc
    return module


def _optional_function(module: Any, target: str, name: str, usage: str) -> Any:
    """The module's function ``name``, None when it has none; anything else is refused."""
    value = getattr(module, name, None)
    if value is not None and not callable(value):
        raise InvalidInputError(f"{target}: {name} is {value!r}, not a function: define {usage}.")
    return value


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
