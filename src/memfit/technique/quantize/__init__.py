"""Base weights quantized by bitsandbytes (``quantize``), as QLoRA loads them: every linear
layer but the output layer becomes bitsandbytes' ``Linear4bit``, its weight packed two values a
byte (NF4 or FP4) with a scale per 64 values, the scales themselves quantized (double
quantization), and dequantized to the compute dtype in each forward and backward (a weight's
worth of scratch at a time). The quantized weights are frozen; with ``lora`` the adapters train
(QLoRA: ``--quantize nf4 --lora 16``).

bitsandbytes' own quantize and dequantize run on the trace's fake tensors (their fake kernels),
so the packed weights and scales are what the installed version makes.

``int8`` makes each such layer ``Linear8bitLt`` as transformers' ``load_in_8bit`` does (int8
weights, a float32 scale per row, transformers' outlier threshold 6.0). Its products split out
the input's columns that hold an outlier, which depends on the values: the trace takes every
column as one, an upper bound, and says so (``memfit.trace._bnb_int8``).
"""

from memfit.technique.quantize._technique import TECHNIQUE, Quantize

__all__ = ["TECHNIQUE", "Quantize"]
