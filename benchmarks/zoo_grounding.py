"""The zoo's zero-shot (open-vocabulary) object detectors (``AutoModelForZeroShotObjectDetection``:
Grounding DINO, MM Grounding DINO): an image and a text prompt naming the classes to find, and
in training each image's labelled boxes, a box's class being the index of its phrase in the
prompt. ``zoo_hf`` builds the models and calls these for its zero-shot detection head.
"""

from __future__ import annotations

from typing import Any

import torch
from zoo_detection import BOXES, detection_labels
from zoo_detection import image_size as detr_image_size

TYPES = ("grounding-dino", "mm-grounding-dino")

# The prompt as the processors tokenize "a cat. a remote control. ..." with BERT's vocabulary:
# [CLS], then each class's phrase followed by a full stop, then [SEP]. The model finds the
# phrases between those delimiters (its ``SPECIAL_TOKENS``) and scores each query against them.
CLASSES = 8  # phrases in the prompt
PHRASE = 2  # tokens per phrase
CLS, SEP, FULL_STOP = 101, 102, 1012
FIRST_WORD = 1999  # BERT's word pieces start after its special and punctuation tokens


def grounding_spec(model_type: str, config: Any) -> dict[str, Any]:
    """The photo as the processor resizes it (shortest side 800, like DETR's: 800 x 1066), the
    prompt's length, and ``BOXES`` objects per image of the prompt's ``CLASSES`` in training."""
    height, width = detr_image_size("detr")
    vocab = int(config.text_config.vocab_size)
    return {
        "main": "pixel_values",
        "labels": "grounding",
        "kind": "detection",
        "shape": [3, height, width],
        "boxes": BOXES,
        "prompt_classes": CLASSES,
        "seq_len": 2 + CLASSES * (PHRASE + 1),
        "vocab": vocab,
        "num_labels": CLASSES,
    }


def grounding_inputs(
    spec: dict[str, Any], batch: int, train: bool, generator: torch.Generator
) -> dict[str, Any]:
    """The images (one random sample repeated), the same prompt for each (random words), and
    in training per image its boxes (``zoo_detection.detection_labels``)."""
    sample = torch.randn(1, *spec["shape"], generator=generator)
    ids = [CLS]
    for _ in range(spec["prompt_classes"]):
        words = torch.randint(FIRST_WORD, spec["vocab"], (PHRASE,), generator=generator)
        ids += [*words.tolist(), FULL_STOP]
    ids.append(SEP)
    input_ids = torch.tensor(ids).expand(batch, len(ids)).clone()
    inputs: dict[str, Any] = {
        "pixel_values": sample.expand(batch, *spec["shape"]),
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "token_type_ids": torch.zeros_like(input_ids),
    }
    if train:
        inputs["labels"] = detection_labels(spec, batch, generator)
    return inputs
