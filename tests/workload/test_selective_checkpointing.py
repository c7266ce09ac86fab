"""Selective activation checkpointing of a model's repeated blocks
(``activation_checkpointing="selective"``): which blocks, what it saves, bad input refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.cli import main
from memfit.technique.checkpointing import checkpoint_blocks, find_blocks, unwrap_blocks
from memfit.workload import make_workload


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=128, n_head=4, vocab_size=1000))


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (4, 128))
    return {"input_ids": ids, "labels": ids}


def test_the_blocks_are_the_layers_a_hugging_face_model_names() -> None:
    from transformers import BertConfig, BertModel

    assert [type(b).__name__ for b in find_blocks(_gpt2())] == ["GPT2Block"] * 3
    bert = BertModel(BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2))
    assert [type(b).__name__ for b in find_blocks(bert)] == ["BertLayer"] * 2  # not embeddings


def test_other_models_blocks_are_their_most_repeated_containers() -> None:
    timm = pytest.importorskip("timm")
    models = pytest.importorskip("torchvision.models")
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False)
    assert {type(b).__name__ for b in find_blocks(vit)} == {"Block"}  # not its Attention
    assert len(find_blocks(models.resnet18())) == 8  # BasicBlocks, across layer1..layer4


def test_a_model_without_repeated_blocks_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"found no repeated blocks in Linear"):
        find_blocks(nn.Linear(4, 4))


def test_selective_saves_less_than_none_and_more_than_full() -> None:
    peaks = {
        setting: memfit.estimate(_gpt2, _batch, activation_checkpointing=setting).peak_allocated
        for setting in (False, "selective", True)
    }
    assert peaks[True] < peaks["selective"] < peaks[False]


def test_the_wrapping_comes_off_again() -> None:
    model = _gpt2()
    blocks = checkpoint_blocks(model)
    assert all("forward" in b.__dict__ for b in blocks)
    assert model.config.use_cache is False  # as transformers' own checkpointing sets it
    unwrap_blocks(model)
    assert not any("forward" in b.__dict__ for b in blocks)


def test_a_model_already_checkpointing_is_refused() -> None:
    model = _gpt2()
    model.gradient_checkpointing_enable()
    with pytest.raises(InvalidInputError, match=r"already has gradient checkpointing.*twice"):
        checkpoint_blocks(model)


def test_an_unknown_checkpointing_setting_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"activation_checkpointing='sometimes'.*selective"):
        make_workload(_gpt2, _batch, activation_checkpointing="sometimes")


def test_the_report_names_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "gpt2", "-b", "1", "-s", "64", "--selective-checkpointing"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the header wraps at the terminal width
    assert "checkpointing selective (matrix products and attention kept)" in out


def test_cli_refuses_both_checkpointing_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["estimate", "gpt2", "-b", "1", "--checkpointing", "--selective-checkpointing"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_cli_refuses_selective_checkpointing_in_inference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["estimate", "gpt2", "-b", "1", "--mode", "infer", "--selective-checkpointing"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "--selective-checkpointing with --mode infer" in err and "Traceback" not in err
