"""Activation checkpointing the user switched on, run by the user's own step (``step_fn``).

The recomputation of a checkpointed block runs inside backward; it must run the kernels the
forward ran (the target GPU's attention and dropout, not meta's), or torch's non-reentrant
checkpoint refuses the mismatch and the reentrant one keeps what other kernels keep. Each step here
is written like memfit's own loop, so its estimate must be that loop's where that loop holds the
batch through the step too (``batch_held=True``), as a step function holds its argument. Tiny
configs: each estimate takes a fraction of a second.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import transformers
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

import memfit
from memfit import Category, UserCodeError

SEQ = 128
IDS = torch.randint(0, 1000, (4, SEQ))
BATCH = {"input_ids": IDS, "labels": IDS}


def _gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=SEQ
    )
    return transformers.GPT2LMHeadModel(config)


def _bert() -> nn.Module:
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        intermediate_size=512,
        vocab_size=1000,
        max_position_embeddings=SEQ,
    )
    return transformers.BertForMaskedLM(config)


def _llama() -> nn.Module:
    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=256,
        vocab_size=1000,
        max_position_embeddings=SEQ,
    )
    return transformers.LlamaForCausalLM(config)


MODELS = {"gpt2": _gpt2, "bert": _bert, "llama": _llama}


def _switched_on(build: Callable[[], nn.Module], kwargs: dict[str, Any] | None) -> nn.Module:
    model = build()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    return model


def bf16_step(model: nn.Module, batch: Any, optimizer: Any) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    del loss  # as memfit's own loop does
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@functools.cache
def _plain(name: str) -> memfit.Estimate:
    """memfit's own loop on the model without checkpointing."""
    return memfit.estimate(MODELS[name], BATCH, precision="bf16-mixed", batch_held=True)


@functools.cache
def _memfits_checkpointing(name: str) -> memfit.Estimate:
    """memfit's own loop with its own switch (the model's, not reentrant)."""
    return memfit.estimate(
        MODELS[name], BATCH, precision="bf16-mixed", activation_checkpointing=True, batch_held=True
    )


def _attention(est: memfit.Estimate) -> list[str]:
    return [note for note in est.notes if note.startswith("attention ran")]


def _same_as_own_loop(user: memfit.Estimate, own: memfit.Estimate) -> None:
    assert user.peak_allocated == own.peak_allocated
    assert user.peak_reserved == own.peak_reserved
    assert user.by_category[Category.ACTIVATION] == own.by_category[Category.ACTIVATION]
    # the recomputed blocks' attention ran the target GPU's kernel, as the forward's did
    assert _attention(user) == _attention(own)


@pytest.mark.parametrize("kwargs", [None, {"use_reentrant": True}, {"use_reentrant": False}])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_transformers_checkpointing_in_a_users_step(name: str, kwargs: Any) -> None:
    build = functools.partial(_switched_on, MODELS[name], kwargs)
    user = memfit.estimate(build, BATCH, step_fn=bf16_step)
    _same_as_own_loop(user, memfit.estimate(build, BATCH, precision="bf16-mixed", batch_held=True))
    if kwargs is None or not kwargs["use_reentrant"]:  # the mechanism memfit's switch uses
        _same_as_own_loop(user, _memfits_checkpointing(name))
    # what checkpointing saves is in the estimate
    plain = _plain(name)
    assert user.by_category[Category.ACTIVATION] < plain.by_category[Category.ACTIVATION] / 2
    assert user.peak_allocated < plain.peak_allocated


class Block(nn.Module):
    """A pre-norm transformer block with attention and dropout, written by hand."""

    def __init__(self, width: int = 128, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width), nn.Dropout(0.1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.norm(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(x)


class Net(nn.Module):
    """Blocks checkpointed by hand in the forward: each one, or in segments, or none."""

    def __init__(self, how: str = "none", reentrant: bool = False) -> None:
        super().__init__()
        self.how, self.reentrant = how, reentrant
        self.embed = nn.Embedding(1000, 128)
        self.blocks = nn.Sequential(*(Block() for _ in range(4)))
        self.head = nn.Linear(128, 1000)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.how == "each":
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=self.reentrant)
        elif self.how == "sequential":
            x = checkpoint_sequential(self.blocks, 4, x, use_reentrant=self.reentrant)
        else:
            x = self.blocks(x)
        return self.head(x)


def net_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    logits = model(batch["input_ids"])
    return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())


def net_step(model: nn.Module, batch: Any, optimizer: Any) -> None:
    loss = net_loss(model, batch)
    loss.backward()
    del loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("how", ["each", "sequential"])
def test_checkpoint_called_by_hand_in_a_users_step(how: str, reentrant: bool) -> None:
    build = functools.partial(Net, how, reentrant)
    user = memfit.estimate(build, BATCH, step_fn=net_step)
    _same_as_own_loop(user, memfit.estimate(build, BATCH, loss_fn=net_loss, batch_held=True))
    plain = memfit.estimate(Net, BATCH, step_fn=net_step)
    assert user.peak_allocated < plain.peak_allocated
    # checkpoint_sequential runs its last segment (one block of four) unchecked
    share = 1 / 2 if how == "sequential" else 1 / 10
    assert user.by_category[Category.ACTIVATION] < share * plain.by_category[Category.ACTIVATION]
    if how == "each" and not reentrant:  # memfit's own checkpointing of the same blocks
        memfits = memfit.estimate(
            Net, BATCH, loss_fn=net_loss, activation_checkpointing=True, batch_held=True
        )
        _same_as_own_loop(user, memfits)


def accumulate_and_clip(micro: int) -> Callable[[nn.Module, Any, Any], None]:
    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        n = batch["input_ids"].shape[0]
        for i in range(0, n, micro):
            part = {k: v[i : i + micro] for k, v in batch.items()}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**part).loss / (n // micro)
            loss.backward()
            del loss
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


@pytest.mark.parametrize("kwargs", [None, {"use_reentrant": True}])
def test_accumulation_and_clipping_with_the_models_checkpointing(kwargs: Any) -> None:
    build = functools.partial(_switched_on, _gpt2, kwargs)
    user = memfit.estimate(build, BATCH, step_fn=accumulate_and_clip(2))
    half = {k: v[:2] for k, v in BATCH.items()}
    own = memfit.estimate(build, half, precision="bf16-mixed", accumulation=2, batch_held=True)
    assert [name for name, _ in user.timeline.phases].count("step1.backward") == 2
    assert user.peak_allocated == own.peak_allocated
    assert user.peak_reserved == own.peak_reserved
    assert _attention(user) == _attention(own)
    # one float32 scalar differs in kind: the loss divided by the micro-batches is made in the
    # step's forward (an activation), in memfit's loop after it (a temporary)
    assert abs(user.by_category[Category.ACTIVATION] - own.by_category[Category.ACTIVATION]) <= 4
    plain = memfit.estimate(_gpt2, BATCH, step_fn=accumulate_and_clip(2))
    assert user.by_category[Category.ACTIVATION] < plain.by_category[Category.ACTIVATION] / 2
    assert user.peak_allocated < plain.peak_allocated


class Fails(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise ValueError("no gradient here")


def test_a_failure_in_the_users_backward_names_the_backward() -> None:
    def step(model: nn.Module, batch: torch.Tensor, optimizer: Any) -> None:
        Fails.apply(model(batch)).sum().backward()

    with pytest.raises(UserCodeError, match=r"ValueError during step1\.backward"):
        memfit.estimate(lambda: nn.Linear(8, 8), torch.randn(4, 8), step_fn=step)
