"""Partial activation checkpointing (``activation_checkpointing=0.5``): that share of the
blocks checkpointed in full, spread evenly; the memory falls block by block; bad values refused
in Python and on the command line."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.cli import main
from memfit.technique.checkpointing import blocks_for, checkpoint_blocks, chosen_blocks, find_blocks


def _gpt2(layers: int = 4) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=layers,
            n_embd=128,
            n_head=4,
            vocab_size=1000,
            n_positions=256,
            bos_token_id=0,
            eos_token_id=0,
        )
    )


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (4, 256))
    return {"input_ids": ids, "labels": ids}


@pytest.mark.parametrize(
    ("fraction", "n", "expected"),
    [(0.5, 4, [1, 3]), (0.25, 4, [3]), (0.75, 4, [1, 2, 3]), (5 / 12, 12, [2, 4, 7, 9, 11])],
)
def test_the_chosen_blocks_are_spread_evenly(fraction: float, n: int, expected: list[int]) -> None:
    blocks = [nn.Linear(1, 1) for _ in range(n)]
    assert [blocks.index(b) for b in chosen_blocks(blocks, fraction)] == expected
    assert blocks_for(fraction, n) == len(expected)


def test_memory_falls_with_each_block_checkpointed() -> None:
    peaks = [
        memfit.estimate(_gpt2, _batch, activation_checkpointing=f).peak_allocated
        for f in (False, 0.25, 0.5, 0.75, True)
    ]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == 5


def test_only_the_chosen_blocks_are_wrapped() -> None:
    model = _gpt2()
    wrapped = checkpoint_blocks(model, selective=False, fraction=0.5)
    blocks = find_blocks(model)
    assert wrapped == [blocks[1], blocks[3]]
    assert ["forward" in b.__dict__ for b in blocks] == [False, True, False, True]


@pytest.mark.parametrize("value", [1.5, 0.0, 1.0, -0.25, "half", 2])
def test_a_value_that_is_no_setting_is_refused(value: object) -> None:
    with pytest.raises(InvalidInputError, match=r"activation_checkpointing=.*fraction between 0"):
        memfit.estimate(_gpt2, _batch, activation_checkpointing=value)  # type: ignore[arg-type]


def test_the_command_line_takes_a_share_and_refuses_others(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "gpt2", "--partial-checkpointing", "1.5"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "1.5 is not between 0 and 1" in err and "--checkpointing" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit):
        main(["estimate", "gpt2", "--partial-checkpointing", "half"])
    assert "'half' is not a number" in capsys.readouterr().err
    assert main(["estimate", "gpt2", "--checkpointing", "--partial-checkpointing", "0.5"]) == 1
    err = capsys.readouterr().err
    assert "--partial-checkpointing 0.5 and --checkpointing both" in err
    assert "Traceback" not in err
    argv = ["estimate", "gpt2", "--mode", "infer", "--partial-checkpointing", "0.5"]
    assert main(argv) == 1
    assert "--partial-checkpointing 0.5 with --mode infer" in capsys.readouterr().err


def test_a_wrapped_model_is_freed_without_the_garbage_collector() -> None:
    import gc
    import weakref

    model = _gpt2()
    blocks = checkpoint_blocks(model, selective=False, fraction=0.5)
    alive = weakref.ref(blocks[0])
    del blocks
    gc.disable()
    try:
        del model  # no cycle through the wrapping: its blocks go with the model, at once
        assert alive() is None
    finally:
        gc.enable()


def test_unwrapping_puts_back_a_forward_another_wrapper_set() -> None:
    from memfit.technique.checkpointing import unwrap_blocks

    model = _gpt2()
    block = find_blocks(model)[0]
    theirs = block.forward  # e.g. an accelerate hook's, set on the instance
    block.forward = theirs
    checkpoint_blocks(model)
    assert block.forward is not theirs
    model(**_batch())["loss"].backward()  # runs through their forward, checkpointed
    unwrap_blocks(model)
    assert block.__dict__["forward"] is theirs
