"""The model's linear layers replaced by bitsandbytes' ``Linear4bit`` (or ``Linear8bitLt``),
each weight quantized where it lies (the GPU, or the trace's fake one) and the full-precision
one let go."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from memfit._errors import InvalidInputError, MissingExtraError

__all__ = ["quantize_note", "quantized"]

BLOCK = 64  # values per scale, bitsandbytes' default for 4 bits
THRESHOLD = 6.0  # LLM.int8's outlier threshold, transformers' default (llm_int8_threshold)
_COMPUTE = {"bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16, "fp16": torch.float16}
_COMPUTE |= {"fp16-mixed": torch.float16}


def quantized(model: nn.Module, kind: str, precision: str) -> nn.Module:
    """``model`` with every linear layer but its output layer in 4 bits (``kind``), double
    quantized, computing in the precision's dtype (fp32 for fp32), or in 8 bits (``int8``)."""
    bnb = _bitsandbytes()
    compute = _COMPUTE.get(precision, torch.float32)
    keep = _output_layers(model)
    names = [n for n, m in model.named_modules() if type(m) is nn.Linear and id(m) not in keep]
    if not names:
        raise InvalidInputError(
            f"quantize={kind!r} found no layer to quantize in {type(model).__name__}: memfit "
            "quantizes its torch.nn.Linear layers but the output layer, and it has none "
            "(GPT-2's Conv1D layers, for one, are not nn.Linear). Estimate it unquantized."
        )
    for name in names:
        old = model.get_submodule(name)
        assert isinstance(old, nn.Linear)
        if kind == "int8":
            model.set_submodule(name, _int8(bnb, old))
            del old
            continue
        with torch.device("meta"):  # its own weight is replaced below: never allocated
            new = bnb.nn.Linear4bit(
                old.in_features,
                old.out_features,
                old.bias is not None,
                compute,
                compress_statistics=True,
                quant_type=kind,
            )
        weight = bnb.nn.Params4bit(
            old.weight.data,
            requires_grad=False,
            blocksize=BLOCK,
            compress_statistics=True,
            quant_type=kind,
            module=new,
        )
        new.weight = weight._quantize(old.weight.device)
        if old.bias is not None:
            new.bias = nn.Parameter(old.bias.data, requires_grad=False)
        new.requires_grad_(False)
        model.set_submodule(name, new)
        del old, weight
    return model


def _int8(bnb: Any, old: nn.Linear) -> nn.Module:
    """``old`` as ``Linear8bitLt``: its weight int8 with a float32 scale per row, made from the
    weight in fp16 where it lies, frozen (``load_in_8bit``'s layer)."""
    with torch.device("meta"):  # its own weight is replaced below: never allocated
        new: nn.Module = bnb.nn.Linear8bitLt(
            old.in_features,
            old.out_features,
            old.bias is not None,
            has_fp16_weights=False,
            threshold=THRESHOLD,
        )
    weight = bnb.nn.Int8Params(old.weight.data, requires_grad=False, has_fp16_weights=False)
    new.weight = weight._quantize(old.weight.device)
    if old.bias is not None:
        new.bias = nn.Parameter(old.bias.data, requires_grad=False)
    new.requires_grad_(False)
    return new


def quantize_note(kind: str, precision: str) -> str:
    """What the estimate assumed of the quantized weights."""
    compute = str(_COMPUTE.get(precision, torch.float32)).removeprefix("torch.")
    try:
        import bitsandbytes

        version = bitsandbytes.__version__
    except ImportError:
        version = "?"
    if kind == "int8":
        return (
            f"weights in int8 by bitsandbytes {version}: every linear layer but the output "
            "layer as Linear8bitLt (a float32 scale a row, outlier threshold "
            f"{THRESHOLD:g} as transformers' load_in_8bit), frozen; its products run in "
            "float16 whatever the precision; the layers left in full precision are as the "
            "model built them"
        )
    return (
        f"weights in {kind} by bitsandbytes {version}: every linear layer but the output layer "
        f"as Linear4bit ({BLOCK} values a scale, the scales quantized again), computing in "
        f"{compute}, frozen; the layers left in full precision (embeddings, norms, the "
        "output layer) are as the model built them (prepare_model_for_kbit_training, which "
        "casts them to fp32, is not assumed)"
    )


def _output_layers(model: nn.Module) -> set[int]:
    """The layers kept in full precision: a transformers model's output embeddings."""
    get = getattr(model, "get_output_embeddings", None)
    out = get() if callable(get) else None
    return {id(out)} if out is not None else set()


def _bitsandbytes() -> Any:
    try:
        import bitsandbytes
    except ImportError as err:
        raise MissingExtraError(
            "bitsandbytes",
            "quantized weights (techniques={'quantize': 'nf4'}, --quantize)",
            "eightbit",
        ) from err
    return bitsandbytes
