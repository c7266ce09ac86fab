"""The accepted names of precisions, optimizers and modes: plain data, importable without torch
(the command line builds its parser from them before anything heavy is loaded)."""

from __future__ import annotations

__all__ = [
    "COMPILED_CHOICES",
    "MODES",
    "MOE_ROUTINGS",
    "OPTIMIZERS",
    "PRECISIONS",
    "STRATEGIES",
]

PRECISIONS = ("fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed")
OPTIMIZERS = (
    "sgd",
    "sgd-foreach",
    "sgd-fused",
    "sgd-forloop",
    "adam",
    "adam-foreach",
    "adam-fused",
    "adam-forloop",
    "adamw",
    "adamw-foreach",
    "adamw-fused",
    "adamw-forloop",
    # each parameter stepped as backward finishes its gradient (memfit.technique.in_backward)
    "sgd-in-backward",
    "adam-in-backward",
    "adamw-in-backward",
    # 8-bit optimizer states, bitsandbytes' Adam8bit / AdamW8bit (pip install 'memfit[eightbit]')
    "adam-8bit",
    "adamw-8bit",
)
MODES = ("train", "infer")
# what to do with a torch.compile'd model: "eager" estimates its uncompiled step
COMPILED_CHOICES = ("eager",)
# how mixture-of-experts routers are answered in a trace (memfit.trace._routing says what each is)
MOE_ROUTINGS = ("balanced", "loaded", "skewed")

# data-parallel strategies memfit estimates (memfit.technique.data_parallel)
STRATEGIES = ("ddp", "fsdp2", "zero1", "zero2", "zero3")
