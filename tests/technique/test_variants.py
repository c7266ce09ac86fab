"""The optimizer's variants (``OptimizerVariant``: an optimizer named with a suffix) tell the
planner what it needs through their hooks: the names they offer for a family, whether they
accumulate over micro-batches, what they save at most, the bytes of their states."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from memfit.technique import TECHNIQUES, OptimizerVariant, optimizer_variant_of
from memfit.technique.eight_bit import _bnb

N = 1_000_000


@dataclass(frozen=True)
class _Settings:  # the settings the planner's hooks read
    precision: str = "bf16-mixed"
    strategy: str | None = None


def _variant(name: str) -> OptimizerVariant:
    variant = optimizer_variant_of(name)
    assert variant is not None
    return variant


def test_every_variant_has_the_words_the_planner_says_it_with() -> None:
    variants = [t for t in TECHNIQUES if isinstance(t, OptimizerVariant)]
    assert len(variants) == 2
    for variant in variants:
        assert variant.searched_words and variant.suffix


def test_stepped_in_backward_is_offered_for_every_family_and_cannot_accumulate() -> None:
    variant = _variant("adamw-in-backward")
    assert variant.offered("sgd", _Settings()) == ("sgd-in-backward",)
    assert variant.offered("adamw", _Settings(strategy="fsdp2")) == ("adamw-in-backward",)
    assert not variant.accumulates


@pytest.mark.parametrize(
    ("precision", "saved"), [("bf16", 2 * N), ("bf16-mixed", 4 * N), ("fp32", 4 * N)]
)
def test_stepped_in_backward_saves_at_most_the_gradients(precision: str, saved: int) -> None:
    assert _variant("adamw-in-backward").saving("adamw-in-backward", N, _Settings(precision)) == (
        saved
    )


def test_stepped_in_backward_saves_nothing_beside_the_scaler_it_cannot_go_with() -> None:
    settings = _Settings("fp16-mixed")
    assert _variant("adamw-in-backward").saving("adamw-in-backward", N, settings) == 0


def test_eight_bit_states_are_offered_for_adam_where_bitsandbytes_steps_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    variant = _variant("adamw-8bit")
    assert variant.accumulates
    monkeypatch.setattr(_bnb, "eight_bit_available", lambda: True)
    assert variant.offered("adamw", _Settings()) == ("adamw-8bit",)
    assert variant.offered("adam", _Settings(strategy="ddp")) == ("adam-8bit",)
    assert variant.offered("sgd", _Settings()) == ()
    assert variant.offered("adamw", _Settings(strategy="fsdp2")) == ()  # DTensor shards
    monkeypatch.setattr(_bnb, "eight_bit_available", lambda: False)
    assert variant.offered("adamw", _Settings()) == ()


@pytest.mark.parametrize(
    ("precision", "saved"),
    [
        ("fp32", 2 * N * 3 - 2 * N * 4 // 256),  # a byte of four, less a scale per 256
        ("bf16", 2 * N * 1 - 2 * N * 4 // 256),  # a byte of two
        ("fp16-mixed", 0),  # not planned beside GradScaler
    ],
)
def test_eight_bit_states_save_three_bytes_of_four_less_their_scales(
    precision: str, saved: int
) -> None:
    assert _variant("adamw-8bit").saving("adamw-8bit", N, _Settings(precision)) == saved


def test_the_states_take_a_byte_in_8_bits_and_the_parameters_bytes_otherwise() -> None:
    assert _variant("adamw-8bit").state_bytes("adamw-8bit", 4) == 1
    assert _variant("adamw-in-backward").state_bytes("adamw-in-backward", 2) == 2
