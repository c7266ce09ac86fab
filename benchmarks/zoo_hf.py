"""The zoo's transformers models: one head per model type, on a small but real config.

Each model type transformers knows is taken through the first of its ``AutoModelFor...`` heads
in ``HEADS`` (causal LM before masked LM before seq2seq LM ...). Its default config is shrunk
generically (``shrink``): layer counts to 2, hidden sizes to 256 with 4 heads of 64, feed-forward
sizes to 1,024, experts to 8, every sub-config the same way, per-layer lists cut to the new depth
keeping one of each kind. Where that config cannot build, wider and then unshrunk widths are
tried (``VARIANTS``). Each candidate is built on the meta device; the one kept is also run once
for real on the CPU (forward, loss and backward at a batch of two, and a forward without labels)
with the inputs the head needs, so that an estimate's failure later is memfit's, not the input's.

    from zoo_hf import hf_entries
"""

from __future__ import annotations

import copy
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import zoo_detection
import zoo_grounding
import zoo_segmentation
import zoo_vlm
from torch import nn
from zoo_shrink import VARIANTS, config_diff, is_size, shrink

__all__ = ["HEADS", "Head", "build_config", "build_hf_model", "head_loss", "hf_entries", "shrink"]


@dataclass(frozen=True)
class Head:
    """A transformers head: its task name, the mapping that lists its types, its auto class,
    and the labels a training batch carries."""

    task: str
    mapping: str
    auto: str
    labels: str  # tokens, class, tokens-class, span, ctc, decoder, contrastive, mask, none,
    # scores (visual question answering's soft targets), series-class, depth (a depth map
    # per image), image (the upscaled image): these two have no loss in the model;
    # image-text (the text's tokens after an image's placeholders, ``IMAGE_TEXT``),
    # detection (per image, a list of labelled boxes: ``zoo_detection``), grounding (a text
    # prompt of classes and per image its labelled boxes: ``zoo_grounding``), segments (per
    # image its segments' masks and classes), prompt-mask (a box prompt and its target mask,
    # the loss the user's): ``zoo_segmentation``
    types: tuple[str, ...] | None = None  # only these of the mapping's types (None: all)


HEADS = [
    Head(
        "seq2seq-lm",
        "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
        "AutoModelForSeq2SeqLM",
        "tokens",
    ),
    Head(
        "speech-seq2seq",
        "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
        "AutoModelForSpeechSeq2Seq",
        "decoder",
    ),
    Head("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM", "tokens"),
    Head("causal-lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM", "tokens"),
    Head(
        "image-classification",
        "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForImageClassification",
        "class",
    ),
    Head(
        "audio-classification",
        "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForAudioClassification",
        "class",
    ),
    Head("ctc", "MODEL_FOR_CTC_MAPPING_NAMES", "AutoModelForCTC", "ctc"),
    Head(
        "video-classification",
        "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForVideoClassification",
        "class",
    ),
    Head(
        "sequence-classification",
        "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForSequenceClassification",
        "class",
    ),
    Head(
        "token-classification",
        "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForTokenClassification",
        "tokens-class",
    ),
    Head(
        "question-answering",
        "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
        "AutoModelForQuestionAnswering",
        "span",
    ),
    # heads for model types none of the above takes; a type keeps the first head that lists it
    Head(
        "zero-shot-image-classification",
        "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForZeroShotImageClassification",
        "contrastive",
    ),
    Head(
        "semantic-segmentation",
        "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
        "AutoModelForSemanticSegmentation",
        "mask",
    ),
    Head(
        "visual-question-answering",
        "MODEL_FOR_VISUAL_QUESTION_ANSWERING_MAPPING_NAMES",
        "AutoModelForVisualQuestionAnswering",
        "scores",
    ),
    Head(
        "time-series-classification",
        "MODEL_FOR_TIME_SERIES_CLASSIFICATION_MAPPING_NAMES",
        "AutoModelForTimeSeriesClassification",
        "series-class",
    ),
    Head("pretraining", "MODEL_FOR_PRETRAINING_MAPPING_NAMES", "AutoModelForPreTraining", "none"),
    Head(
        "depth-estimation",
        "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
        "AutoModelForDepthEstimation",
        "depth",
    ),
    Head(
        "image-to-image",
        "MODEL_FOR_IMAGE_TO_IMAGE_MAPPING_NAMES",
        "AutoModelForImageToImage",
        "image",
    ),
    # contrastive pairs of text and audio, video or images whose types no head above lists
    Head(
        "contrastive",
        "MODEL_MAPPING_NAMES",
        "AutoModel",
        "contrastive",
        types=("clap", "xclip", "groupvit", "owlvit", "owlv2"),
    ),
    # vision-language models: text with an image's placeholder tokens, trained on the text
    Head(
        "image-text-to-text",
        "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
        "AutoModelForImageTextToText",
        "image-text",
        types=(
            "aya_vision",
            "cohere2_vision",
            "deepseek_vl",
            "lighton_ocr",
            "llava_next_video",
            "video_llava",
            "fast_vlm",
            "idefics3",
            "internvl",
            "janus",
            "kosmos-2",
            "lfm2_vl",
            "llava",
            "llava_next",
            "llava_onevision",
            "mistral3",
            "ovis2",
            "paligemma",
            "qwen2_5_vl",
            "qwen2_vl",
            "qwen3_vl",
            "smolvlm",
            "vipllava",
        ),
    ),
    # object detectors: an image and, per image, its objects' classes and boxes
    Head(
        "object-detection",
        "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
        "AutoModelForObjectDetection",
        "detection",
        types=zoo_detection.TYPES,
    ),
    # universal (semantic, instance, panoptic) segmentation: per image, its segments' masks and
    # classes
    Head(
        "universal-segmentation",
        "MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES",
        "AutoModelForUniversalSegmentation",
        "segments",
        types=zoo_segmentation.UNIVERSAL,
    ),
    # open-vocabulary detectors: an image, a prompt naming the classes, labelled boxes
    Head(
        "zero-shot-object-detection",
        "MODEL_FOR_ZERO_SHOT_OBJECT_DETECTION_MAPPING_NAMES",
        "AutoModelForZeroShotObjectDetection",
        "grounding",
        types=zoo_grounding.TYPES,
    ),
    # promptable segmentation (the SAM family): an image, a box prompt, the box's mask
    Head(
        "mask-generation",
        "MODEL_FOR_MASK_GENERATION_MAPPING_NAMES",
        "AutoModelForMaskGeneration",
        "prompt-mask",
        types=zoo_segmentation.MASK_GENERATION,
    ),
]
HEAD_BY_TASK = {head.task: head for head in HEADS}

# -- building ------------------------------------------------------------------------------------


def build_config(model_type: str, diff: dict[str, Any]) -> Any:
    """The config of ``model_type``: its default with ``diff`` (``config_diff``) applied."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **copy.deepcopy(diff))


def build_hf_model(model_type: str, head_task: str, diff: dict[str, Any]) -> nn.Module:
    """The head's model on its config, built on the device that is the default now."""
    import transformers

    config = build_config(model_type, diff)
    head = HEAD_BY_TASK[head_task]
    auto = getattr(transformers, head.auto, None)
    if auto is None:  # a mapping with no auto class of its own: the class it names
        cls = getattr(transformers, head_class(model_type, head))
        return cls._from_config(config, dtype=torch.float32)  # type: ignore[no-any-return]
    return auto.from_config(config, dtype=torch.float32)  # type: ignore[no-any-return]


def _meta_params(model_type: str, head: Head, diff: dict[str, Any]) -> int:
    with torch.device("meta"):
        model = build_hf_model(model_type, head.task, diff)
    return sum(p.numel() for p in model.parameters())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def head_of(model_type: str) -> Head | None:
    """The head of ``model_type``: a head that names it in its ``types`` (the sweep makes that
    head's inputs for it), else the first head in ``HEADS`` whose mapping lists it."""
    from transformers.models.auto import modeling_auto

    named = [head for head in HEADS if head.types is not None and model_type in head.types]
    for head in named or [head for head in HEADS if head.types is None]:
        if model_type in getattr(modeling_auto, head.mapping):
            return head
    return None


def head_class(model_type: str, head: Head) -> str:
    from transformers.models.auto import modeling_auto

    name = getattr(modeling_auto, head.mapping)[model_type]
    return name if isinstance(name, str) else name[0]


def candidates(model_type: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The configs to try, narrowest first: each variant's difference from the default, then
    the default itself (an empty difference)."""
    from transformers import CONFIG_MAPPING

    default = CONFIG_MAPPING[model_type]().to_dict()
    seen: list[dict[str, Any]] = []
    for variant in VARIANTS:
        diff = config_diff(default, shrink(default, variant))
        if diff not in seen:
            seen.append(diff)
            yield variant.name, diff
    if {} not in seen:
        yield "default", {}


# -- inputs --------------------------------------------------------------------------------------


def _sub(config: Any, *names: str) -> Any:
    """An attribute of the config or of its vision/audio/text sub-config."""
    for holder in (
        config,
        getattr(config, "vision_config", None),
        getattr(config, "audio_config", None),
        getattr(config, "encoder_config", None),
        getattr(config, "text_config", None),
    ):
        for name in names:
            value = getattr(holder, name, None) if holder is not None else None
            if value is not None:
                return value
    return None


def text_length(config: Any) -> int:
    """The sequence a text head is fed: 512 tokens, or fewer where the config's position table
    is shorter (two kept back for position ids that start after the padding index)."""
    limit = _sub(config, "max_position_embeddings", "n_positions", "max_seq_len", "n_ctx")
    if not is_size(limit) or limit <= 0:
        return 512
    return int(min(512, limit - 2 if limit <= 514 else limit))


def _image_size(config: Any) -> tuple[int, int]:
    ratios = getattr(config, "scaled_images_ratios", None)
    patch = getattr(config, "patch_size", None)
    if ratios and is_size(patch):  # an image pyramid of patches: its smallest scale is a patch
        side = round(patch / min(ratios))
        return side, side
    size = _sub(config, "image_size", "img_size", "input_size")
    if isinstance(size, (list, tuple)):
        size = [s for s in size if is_size(s)][-2:]
        return (int(size[0]), int(size[1])) if len(size) == 2 else (224, 224)
    return (int(size), int(size)) if is_size(size) else (224, 224)


DECODER_TOKENS = 128  # a speech decoder's tokens: a sentence or two
CLAP_FRAMES = 1001  # ten seconds of log-mel frames, as CLAP's feature extractor makes them


def input_spec(model_type: str, head: Head, config: Any, main_input: str) -> list[dict[str, Any]]:
    """Candidate inputs for the head, in the order to try them: one for most heads; audio has
    several layouts (a waveform, or features as frames x bins or bins x frames). ``shape`` is
    a floating input's shape per sample."""
    if head.labels == "image-text":
        return [zoo_vlm.image_text_spec(model_type, config)]
    if head.labels == "detection":
        return [zoo_detection.detection_spec(model_type, config)]
    if head.labels == "segments":
        return [zoo_segmentation.universal_spec(model_type, config)]
    if head.labels == "prompt-mask":
        return [zoo_segmentation.mask_generation_spec(model_type, config)]
    if head.labels == "grounding":
        return [zoo_grounding.grounding_spec(model_type, config)]
    base: dict[str, Any] = {"main": main_input, "labels": head.labels}
    vocab = _sub(config, "vocab_size")
    base["vocab"] = int(vocab) if is_size(vocab) else 256  # character models: bytes
    labels = getattr(config, "num_labels", None)
    base["num_labels"] = int(labels) if is_size(labels) else 2
    if head.task == "speech-seq2seq":
        base["decoder"] = DECODER_TOKENS
    height, width = _image_size(config)
    channels = int(_sub(config, "num_channels", "in_chans", "in_channels") or 3)
    if main_input == "input_ids":
        length = text_length(config)
        if head.task == "seq2seq-lm":
            base["decoder"] = length
        if head.labels in ("contrastive", "scores"):  # text and an image: a pair per sample
            audio = getattr(config, "audio_config", None)
            if audio is not None:  # text and a clip's log-mel features (frames x bins)
                bins = int(getattr(audio, "num_mel_bins", None) or 64)
                return [{**base, "seq_len": length, "audio": [1, CLAP_FRAMES, bins]}]
            frames = _sub(config, "num_frames")
            image = [channels, height, width]
            video = [int(frames), *image] if is_size(frames) else image  # text and a clip
            return [{**base, "seq_len": length, "image": video}]
        return [{**base, "seq_len": length}]
    if main_input == "pixel_values":
        frames = _sub(config, "num_frames")
        if head.task == "video-classification" and is_size(frames):
            return [{**base, "shape": [int(frames), channels, height, width]}]
        if head.labels == "depth":  # a depth map at the image's size
            return [{**base, "shape": [channels, height, width], "target": [height, width]}]
        if head.labels == "image":  # the image upscaled by the model's factor
            scale = int(getattr(config, "upscale", 1) or 1)
            target = [channels, height * scale, width * scale]
            return [{**base, "shape": [channels, height, width], "target": target}]
        return [{**base, "shape": [channels, height, width]}]
    if main_input == "past_values":
        context = _sub(config, "context_length")
        series = _sub(config, "num_input_channels")
        classes = _sub(config, "num_targets")
        base["num_labels"] = int(classes) if is_size(classes) else 2
        shape = [int(context) if is_size(context) else 512, int(series) if is_size(series) else 1]
        return [{**base, "shape": shape}]
    if main_input not in ("input_values", "input_features"):
        return [base]  # an input the sweep does not make: the check says so
    mel = int(_sub(config, "num_mel_bins", "feature_size", "input_feat_per_channel") or 80)
    channels = int(_sub(config, "input_channels") or 1)
    frames = _sub(config, "max_source_positions")
    length = _sub(config, "max_length")
    layouts = [[AUDIO_SAMPLES]] if main_input == "input_values" else []
    if is_size(frames):
        layouts.append([mel, 2 * int(frames)])
    if is_size(length) and length > 1:
        layouts.append([int(length), mel])
    layouts += [[600, mel * channels], [mel, 600], [mel, 1024]]
    return [{**base, "shape": shape} for shape in layouts]


AUDIO_SAMPLES = 32000  # two seconds at 16 kHz


def make_inputs(
    spec: dict[str, Any], batch: int, train: bool, generator: torch.Generator
) -> dict[str, Any]:
    """A batch of ``batch`` samples as ``spec`` says, on the CPU; labels only for training.
    A floating input is one random sample repeated (``expand``): its values do not change the
    memory, and a large batch costs the host nothing until it is moved to a device."""
    if spec["labels"] == "image-text":
        return zoo_vlm.image_text_inputs(spec, batch, train, generator)
    if spec["labels"] == "segments":
        return zoo_segmentation.universal_inputs(spec, batch, train, generator)
    if spec["labels"] == "prompt-mask":
        return zoo_segmentation.mask_generation_inputs(spec, batch, train, generator)
    if spec["labels"] == "grounding":
        return zoo_grounding.grounding_inputs(spec, batch, train, generator)
    main = spec["main"]
    if main == "input_ids":
        ids = torch.randint(0, spec["vocab"], (batch, spec["seq_len"]), generator=generator)
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if "image" in spec:
            sample = torch.randn(1, *spec["image"], generator=generator)
            inputs["pixel_values"] = sample.expand(batch, *spec["image"])
        if "audio" in spec:
            sample = torch.randn(1, *spec["audio"], generator=generator)
            inputs["input_features"] = sample.expand(batch, *spec["audio"])
    elif "shape" not in spec:
        raise ValueError(f"the sweep makes no {main!r} input (the head's main input)")
    else:
        sample = torch.randn(1, *spec["shape"], generator=generator)
        inputs = {main: sample.expand(batch, *spec["shape"])}
    if train:
        inputs.update(_labels(spec, batch, generator))
    elif "decoder" in spec:  # an encoder-decoder without labels is given the decoder's tokens
        shape = (batch, spec["decoder"])
        inputs["decoder_input_ids"] = torch.randint(0, spec["vocab"], shape, generator=generator)
    return inputs


def _labels(spec: dict[str, Any], batch: int, generator: torch.Generator) -> dict[str, Any]:
    kind = spec["labels"]
    classes = spec["num_labels"]
    if kind == "none":  # the head's loss needs no labels (masked image modelling)
        return {}
    if kind == "detection":
        return {"labels": zoo_detection.detection_labels(spec, batch, generator)}
    if kind in ("depth", "image"):  # the loss is the user's (``head_loss``): its target
        sample = torch.rand(1, *spec["target"], generator=generator)
        return {TARGET: sample.expand(batch, *spec["target"])}
    if kind == "contrastive":  # each text against each image of the batch
        return {"return_loss": True}
    if kind == "mask":
        shape = (batch, *spec["shape"][-2:])
        return {"labels": torch.randint(0, classes, shape, generator=generator)}
    if kind == "scores":
        return {"labels": torch.rand(batch, classes, generator=generator)}
    if kind == "series-class":
        return {"target_values": torch.randint(0, classes, (batch,), generator=generator)}
    if kind == "tokens":
        return {
            "labels": torch.randint(0, spec["vocab"], (batch, spec["seq_len"]), generator=generator)
        }
    if kind == "decoder":
        shape = (batch, spec["decoder"])
        return {"labels": torch.randint(0, spec["vocab"], shape, generator=generator)}
    if kind == "class":
        return {"labels": torch.randint(0, classes, (batch,), generator=generator)}
    if kind == "tokens-class":
        return {"labels": torch.randint(0, classes, (batch, spec["seq_len"]), generator=generator)}
    if kind == "span":
        ends = torch.randint(0, spec["seq_len"], (batch,), generator=generator)
        return {"start_positions": ends // 2, "end_positions": ends}
    # ctc: 16 characters a second of audio, never the blank (0)
    return {"labels": torch.randint(1, spec["vocab"], (batch, 16), generator=generator)}


TARGET = "target"  # the batch's key for a target the model is not given


def head_loss(labels: str) -> Callable[[nn.Module, dict[str, Any]], torch.Tensor] | None:
    """The training loss for a head whose model computes none (transformers raises for their
    labels), as users write it: an L1 loss of the prediction against the batch's target, the
    prediction resized to the target's size where the model's output is smaller; a promptable
    mask model's: ``zoo_segmentation.mask_loss``. None: the model's own ``loss``."""
    if labels == "prompt-mask":
        return zoo_segmentation.head_loss(labels)
    if labels not in ("depth", "image"):
        return None
    field = "predicted_depth" if labels == "depth" else "reconstruction"

    def loss_fn(model: nn.Module, batch: dict[str, Any]) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k != TARGET}
        target = batch[TARGET]
        prediction = getattr(model(**inputs), field)
        if prediction.shape[-2:] != target.shape[-2:]:
            squeeze = prediction.dim() == 3
            resized = F.interpolate(
                prediction.unsqueeze(1) if squeeze else prediction,
                size=target.shape[-2:],
                mode="bilinear",
                align_corners=False,
            )
            prediction = resized.squeeze(1) if squeeze else resized
        return F.l1_loss(prediction.float(), target.float())

    return loss_fn


def fitted(model_type: str, head: Head, diff: dict[str, Any]) -> dict[str, Any]:
    """The config ``diff`` with what the head's inputs need (a vision-language model's:
    ``zoo_vlm.fitted``; a detector's backbone: ``zoo_detection.fitted``; the Swin backbones of
    the segmentation and zero-shot heads: the same; EoMT's query layers and a SAM's global
    attention layer: ``zoo_segmentation.fitted``); other heads'
    configs are not changed."""
    if head.labels == "detection":
        return zoo_detection.fitted(model_type, diff, build_config(model_type, diff))
    if head.labels in ("grounding", "segments"):  # transformers' Swin backbones' levels
        diff = zoo_detection.fitted(model_type, diff, build_config(model_type, diff))
    if head.labels in ("prompt-mask", "segments"):
        return zoo_segmentation.fitted(model_type, diff)
    if head.labels != "image-text":
        return diff
    return zoo_vlm.fitted(model_type, diff, build_config(model_type, diff))


# what meta tensors cannot do (a value read from the data), as torch words it
_META_LIMITS = ("on meta tensors", "out of meta tensor", "data-dependent", "data dependent")


def _check_inputs(
    model_type: str,
    head: Head,
    diff: dict[str, Any],
    specs: list[dict[str, Any]],
    device: str,
) -> tuple[dict[str, Any] | None, str]:
    """The first input spec the model takes on ``device`` (loss and backward, then a forward
    without labels), and what failed where none does. On the CPU the run is real; on meta
    (models too large to run here) it checks shapes, and a value meta tensors cannot give
    (a data-dependent step) ends the check without refusing the input."""
    torch.manual_seed(0)
    with torch.device(device):
        model = build_hf_model(model_type, head.task, diff)
    failure = ""

    def fed(spec: dict[str, Any], train: bool, generator: torch.Generator) -> dict[str, Any]:
        inputs = make_inputs(spec, 2, train, generator)
        return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}

    try:
        for spec in specs:
            generator = torch.Generator().manual_seed(0)
            try:
                model.train()
                custom = head_loss(head.labels)
                batch = fed(spec, True, generator)
                out = custom(model, batch) if custom else model(**batch)
                loss = out if custom else getattr(out, "loss", None)
                if not isinstance(loss, torch.Tensor):
                    raise ValueError("the head returned no loss for its labels")
                loss.backward()
                model.zero_grad(set_to_none=True)
                model.eval()
                with torch.no_grad():
                    model(**fed(spec, False, generator))
            except Exception as exc:  # the next layout, else the reasons
                if device == "meta" and any(p in str(exc) for p in _META_LIMITS):
                    return spec, _first_line(exc)
                failure = "; ".join(filter(None, [failure, _first_line(exc)]))
                continue
            return spec, ""
        return None, failure
    finally:
        del model
        gc.collect()


def _main_input(model_type: str, head: Head) -> str:
    import transformers

    cls = getattr(transformers, head_class(model_type, head), None)
    return str(getattr(cls, "main_input_name", "input_ids"))


CPU_CHECK_PARAMS = 400_000_000  # larger models are checked on meta (shapes only)
MAX_PARAMS = 1_000_000_000  # a config still larger is no small model: not taken


def hf_entry(model_type: str, head: Head) -> dict[str, Any]:
    """One type's entry: the first candidate config that builds on meta and takes the head's
    inputs on the CPU; ``error`` with each candidate's reason where none does."""
    start = time.perf_counter()
    entry: dict[str, Any] = {
        "id": f"hf:{model_type}",
        "source": "transformers",
        "group": head.task,
        "head": head.auto,
        "head_class": head_class(model_type, head),
        "seed": 0,
    }
    reasons = []
    for variant, diff in candidates(model_type):
        try:
            diff = fitted(model_type, head, diff)
            params = _meta_params(model_type, head, diff)
            config = build_config(model_type, diff)
        except Exception as exc:  # the library refuses this config: the next one
            reasons.append(f"{variant}: does not build: {_first_line(exc)}")
            continue
        if params > MAX_PARAMS:
            reasons.append(f"{variant}: {params / 1e9:.1f}B parameters, more than the sweep takes")
            continue
        specs = input_spec(model_type, head, config, _main_input(model_type, head))
        build = {"kind": "transformers", "model_type": model_type, "task": head.task}
        found = {"params": params, "shrink": variant, "build": {**build, "config": diff}}
        device = "meta" if params > CPU_CHECK_PARAMS else "cpu"
        try:
            spec, failure = _check_inputs(model_type, head, diff, specs, device)
        except Exception as exc:
            spec, failure = None, _first_line(exc)
        if spec is not None:
            checked = f"forward, loss and backward at batch 2 on the {device.upper()}"
            if failure:  # on meta, up to a value read from the data
                checked += f", up to a value meta tensors cannot give ({failure[:200]})"
            entry.update(found, input=spec, checked=checked)
            break
        reasons.append(f"{variant}: inputs fail on the {device.upper()}: {failure}")
    if "build" not in entry:
        phase = "input check" if any("inputs fail" in r for r in reasons) else "build"
        entry["error"] = {"phase": phase, "message": " | ".join(reasons)[:3000]}
    elif reasons:
        entry["skipped_variants"] = reasons
    entry["list_seconds"] = round(time.perf_counter() - start, 2)
    return entry


def hf_types() -> Iterator[tuple[str, Head | None]]:
    """Every model type transformers knows, with its first head in ``HEADS`` (None: none)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    for model_type in sorted(CONFIG_MAPPING_NAMES):
        yield model_type, head_of(model_type)


def hf_entries(
    only: set[str] | None = None, progress: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """The entries of every type with a head (or of ``only``); the others are not listed."""
    entries = []
    for model_type, head in hf_types():
        if head is None or (only is not None and model_type not in only):
            continue
        entry = hf_entry(model_type, head)
        state = entry.get("error", {}).get("message", entry.get("shrink"))
        progress(f"hf {model_type:32s} {head.task:24s} {state}")
        entries.append(copy.deepcopy(entry))
    return entries
