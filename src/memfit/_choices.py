"""The accepted names of precisions, optimizers and modes: plain data, importable without torch
(the command line builds its parser from them before anything heavy is loaded)."""

from __future__ import annotations

__all__ = ["MODES", "OPTIMIZERS", "PRECISIONS"]

PRECISIONS = ("fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed")
OPTIMIZERS = (
    "sgd",
    "sgd-foreach",
    "sgd-fused",
    "adam",
    "adam-foreach",
    "adam-fused",
    "adamw",
    "adamw-foreach",
    "adamw-fused",
)
MODES = ("train", "infer")
