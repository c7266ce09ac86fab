"""Base weights quantized by bitsandbytes (``quantize``), as QLoRA loads them: every linear
layer but the output layer becomes bitsandbytes' ``Linear4bit``, its weight packed two values a
byte (NF4 or FP4) with a scale per 64 values, the scales themselves quantized (double
quantization), and dequantized to the compute dtype in each forward and backward (a weight's
worth of scratch at a time). The quantized weights are frozen; with ``lora`` the adapters train
(QLoRA: ``--quantize nf4 --lora 16``).

bitsandbytes' own quantize and dequantize run on the trace's fake tensors (their fake kernels),
so the packed weights and scales are what the installed version makes. ``int8`` (LLM.int8's
outlier decomposition, which depends on the values) is refused, not guessed.
"""

from memfit.technique.quantize._technique import TECHNIQUE, Quantize

__all__ = ["TECHNIQUE", "Quantize"]
