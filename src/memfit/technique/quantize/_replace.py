"""The model's linear layers replaced by bitsandbytes' ``Linear4bit``, each weight quantized
where it lies (the GPU, or the trace's fake one) and the full-precision one let go."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from memfit._errors import MissingExtraError

__all__ = ["quantize_note", "quantized"]

BLOCK = 64  # values per scale, bitsandbytes' default for 4 bits
_COMPUTE = {"bf16": torch.bfloat16, "bf16-mixed": torch.bfloat16, "fp16": torch.float16}
_COMPUTE |= {"fp16-mixed": torch.float16}


def quantized(model: nn.Module, kind: str, precision: str) -> nn.Module:
    """``model`` with every linear layer but its output layer in 4 bits (``kind``), double
    quantized, computing in the precision's dtype (fp32 for fp32)."""
    bnb = _bitsandbytes()
    compute = _COMPUTE.get(precision, torch.float32)
    keep = _output_layers(model)
    names = [n for n, m in model.named_modules() if type(m) is nn.Linear and id(m) not in keep]
    for name in names:
        old = model.get_submodule(name)
        assert isinstance(old, nn.Linear)
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


def quantize_note(kind: str, precision: str) -> str:
    """What the estimate assumed of the quantized weights."""
    compute = str(_COMPUTE.get(precision, torch.float32)).removeprefix("torch.")
    try:
        import bitsandbytes

        version = bitsandbytes.__version__
    except ImportError:
        version = "?"
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
            "bitsandbytes", "4-bit weights (techniques={'quantize': 'nf4'}, --quantize)", "eightbit"
        ) from err
    return bitsandbytes
