"""Small Llama models and token batches for the techniques' tests (built from a config)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

VOCAB = 1000


def llama_factory(
    hidden: int, intermediate: int, heads: int, kv_heads: int
) -> Callable[[], nn.Module]:
    """A factory of a two-layer Llama of these sizes."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
    )
    return lambda: transformers.LlamaForCausalLM(config)


def token_batch(rows: int, length: int) -> Callable[[], dict[str, torch.Tensor]]:
    """A factory of a batch of random tokens, its labels the tokens."""

    def tokens() -> dict[str, torch.Tensor]:
        ids = torch.randint(0, VOCAB, (rows, length))
        return {"input_ids": ids, "labels": ids}

    return tokens
