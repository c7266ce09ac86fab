"""find_batch_size on the CPU: the estimator's search, real models, errors, the CLI."""

from __future__ import annotations

import importlib
import importlib.util
import json

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

import memfit
from memfit.estimator import estimate_workload
from memfit.runtime._bs_search import TOLERANCE
from memfit.workload import make_workload
from memfit.workload._models import classification_loss

SEQ = 128


def tiny_bert():
    return BertForMaskedLM(
        BertConfig(
            vocab_size=1000,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            max_position_embeddings=256,
        )
    )


def tiny_gpt2():
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=256)
    )


def tokens(n):
    ids = torch.randint(0, 1000, (n, SEQ))
    return {"input_ids": ids, "labels": ids}


def images(n):
    return (torch.randn(n, 3, 64, 64), torch.randint(0, 10, (n,)))


def total(model, make_batch, n, gpu="1GiB", **kw):
    """An independent estimate at batch n: the least reserved memory the step runs in (the
    allocator frees its cache under pressure) plus the CUDA context."""
    work = make_workload(
        model,
        lambda: make_batch(n),
        loss_fn=kw.get("loss_fn"),
        optimizer=kw.get("optimizer", "adamw"),
        precision=kw.get("precision", "fp32"),
        gpu=gpu,
    )
    est = estimate_workload(work, with_least_capacity=True)
    assert est.least_capacity is not None and est.least_capacity <= est.peak_reserved
    return est.least_capacity + est.non_pytorch


@pytest.mark.parametrize(
    ("model", "make_batch", "kwargs", "gpu", "step"),
    [
        (tiny_bert, tokens, {}, "1GiB", 1),
        (tiny_gpt2, tokens, {"precision": "bf16-mixed"}, "1GiB", 8),
        pytest.param(
            lambda: importlib.import_module("torchvision").models.resnet18(num_classes=10),
            images,
            {"loss_fn": classification_loss, "optimizer": "sgd"},
            "1GiB",
            4,
            marks=pytest.mark.skipif(
                importlib.util.find_spec("torchvision") is None, reason="needs torchvision"
            ),
        ),
    ],
    ids=["bert", "gpt2-bf16-mixed", "resnet18-sgd"],
)
def test_the_batch_is_the_largest_whose_estimate_fits(model, make_batch, kwargs, gpu, step):
    result = memfit.find_batch_size(
        model, make_batch, gpu=gpu, confirm=False, multiple_of=step, **kwargs
    )
    b = result.batch_size
    assert b >= step and b % step == 0
    assert result.budget == memfit.resolve_gpu(gpu).total - result.margin
    assert result.margin == int(0.02 * memfit.resolve_gpu(gpu).total)
    # the estimate at b fits the budget, and one at a size at most the tolerance above does
    # not (the next allowed size, for batches this small)
    failed = min(p.batch_size for p in result.estimates if p.batch_size > b)
    assert failed - b <= max(step, b * TOLERANCE)
    assert total(model, make_batch, b, gpu, **kwargs) <= result.budget
    assert total(model, make_batch, failed, gpu, **kwargs) > result.budget
    assert result.predicted_total == total(model, make_batch, b, gpu, **kwargs)
    assert len(result.estimates) <= 10, [p.batch_size for p in result.estimates]
    assert not result.confirmed and result.trials == []
    assert result.limited_by == "memory"


def test_max_batch_caps_the_answer():
    result = memfit.find_batch_size(tiny_bert, tokens, gpu="h100", confirm=False, max_batch=16)
    assert result.batch_size == 16
    assert result.limited_by == "max_batch"
    assert len(result.estimates) <= 3


def test_result_serialises_with_every_estimate():
    result = memfit.find_batch_size(tiny_gpt2, tokens, gpu="1GiB", confirm=False)
    data = json.loads(result.to_json())
    assert data["batch_size"] == result.batch_size
    assert data["units"] == "bytes"
    assert [p["batch_size"] for p in data["estimates"]] == sorted(
        p.batch_size for p in result.estimates
    )
    assert data["per_sample"] > 0
    assert str(result.batch_size) in str(result)
    assert data["predicted_need"] <= data["predicted_peak_reserved"]
    assert isinstance(data["predicted_alloc_retries"], int)  # known: the search replayed it


def test_margin_as_a_size_lowers_the_budget():
    loose = memfit.find_batch_size(tiny_bert, tokens, gpu="1GiB", confirm=False, margin=0.0)
    tight = memfit.find_batch_size(tiny_bert, tokens, gpu="1GiB", confirm=False, margin="64MiB")
    assert loose.margin == 0 and tight.margin == 64 * 2**20
    assert tight.batch_size < loose.batch_size


def test_nothing_fits_at_batch_one_names_the_prediction():
    # the CUDA context (758 MiB) and the margin leave no room on this GPU
    with pytest.raises(memfit.DoesNotFitError, match=r"even at batch size 1: the estimate is"):
        memfit.find_batch_size(tiny_bert, tokens, gpu="800MiB", margin="60MiB", confirm=False)


@pytest.mark.parametrize(
    ("make_batch", "match"),
    [
        (lambda: tokens(2), "must be a function of one argument"),
        ("not callable", "must be a function of one argument"),
        (None, "Give make_batch"),
    ],
)
def test_bad_batch_factories_are_refused_before_any_estimate(make_batch, match):
    with pytest.raises(memfit.InvalidInputError, match=match):
        memfit.find_batch_size(tiny_bert, make_batch, gpu="1GiB", confirm=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"margin": 0.7}, "not a fraction"),
        ({"margin": "2GiB"}, "leaves nothing"),
        ({"multiple_of": 0}, "allow no batch size"),
        ({"max_batch": 4, "multiple_of": 8}, "allow no batch size"),
        ({"gpu": "tpu-v9"}, "is not known"),
    ],
)
def test_bad_settings_are_named(kwargs, match):
    kwargs = {"gpu": "1GiB", **kwargs}
    with pytest.raises(memfit.InvalidInputError, match=match):
        memfit.find_batch_size(tiny_bert, tokens, confirm=False, **kwargs)


def test_a_module_cannot_be_confirmed():
    with pytest.raises(memfit.InvalidInputError, match="zero-argument factory"):
        memfit.find_batch_size(tiny_bert(), tokens, gpu="1GiB", confirm=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_confirm_without_a_gpu_is_a_no_gpu_error():
    with pytest.raises(memfit.NoGPUError, match="confirm=False"):
        memfit.find_batch_size(tiny_bert, tokens, gpu="1GiB")
    with pytest.raises(memfit.InvalidInputError, match="give gpu="):
        memfit.find_batch_size(tiny_bert, tokens, confirm=False)


def test_a_module_can_be_estimated():
    result = memfit.find_batch_size(tiny_bert(), tokens, gpu="1GiB", confirm=False)
    assert result.batch_size >= 1


def test_cli_max_batch_size(tmp_path, capsys):
    from memfit.cli import main

    config = tmp_path / "config.json"
    tiny_gpt2().config.to_json_file(config)
    argv = ["estimate", f"hf:{config}", "-s", "64", "--max-batch-size", "--gpu", "1GiB"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["batch_size"] >= 1 and data["limited_by"] == "memory"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"Largest batch size: {data['batch_size']}" in out
    assert "runs in" in out  # the least memory the step needs, beside the peak reserved
    # the cache-free warning is printed exactly when the search predicts such frees
    assert ("fits only because the allocator frees its cache" in out) == bool(
        data["predicted_alloc_retries"]
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cli_max_batch_size_without_gpu_is_a_clear_error(capsys):
    from memfit.cli import main

    assert main(["estimate", "gpt2", "-s", "64", "--max-batch-size"]) == 1
    assert "give gpu=" in capsys.readouterr().err


def test_cli_max_batch_size_draws_the_search(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from memfit.cli import main

    config = tmp_path / "config.json"
    tiny_gpt2().config.to_json_file(config)
    png = tmp_path / "search.png"
    argv = ["estimate", f"hf:{config}", "-s", "64", "--max-batch-size", "--gpu", "1GiB"]
    assert main([*argv, "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Plot written to {png}" in capsys.readouterr().out
    # a format no plot has is refused before the search, with the fix in the message
    assert main([*argv, "--plot", str(tmp_path / "search.pdf")]) == 1
    err = capsys.readouterr().err
    assert "'.pdf'" in err and ".svg" in err and "Traceback" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cli_confirm_without_a_gpu_says_how_to_do_without(capsys):
    from memfit.cli import main

    assert main(["estimate", "gpt2", "-s", "64", "--max-batch-size", "--confirm"]) == 2
    err = capsys.readouterr().err
    assert "--confirm runs trials on this machine's GPU" in err and "--gpu" in err
    assert "Traceback" not in err


def test_cli_confirm_needs_max_batch_size(capsys):
    from memfit.cli import main

    assert main(["estimate", "gpt2", "-b", "2", "-s", "64", "--confirm"]) == 1
    assert "--confirm goes with --max-batch-size" in capsys.readouterr().err
