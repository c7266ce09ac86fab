"""The workload spec: settings parsed and checked once, then passed whole."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import memfit
from memfit.allocator import AllocatorConfig
from memfit.cli._options import workload_options
from memfit.cli._parser import make_parser
from memfit.workload import Workload, WorkloadOptions, make_workload


def tiny() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_settings_are_parsed_once_into_the_spec():
    work = make_workload(
        "gpt2",
        batch_size=4,
        seq_len=64,
        precision="bf16-mixed",
        allocator_config="expandable_segments:True",
        gpu="24GiB",
    )
    assert work.allocator == AllocatorConfig(expandable_segments=True)
    assert work.allocator_text == "expandable_segments:True"
    assert work.gpu == memfit.resolve_gpu("24GiB")
    assert (work.name, work.batch_size, work.seq_len, work.precision) == (
        "gpt2",
        4,
        64,
        "bf16-mixed",
    )
    assert work.batch_text == "4 x 64 tokens"
    assert work.steps == 2


def test_cheap_settings_fail_before_the_model_is_looked_up():
    # the model name matches nothing, but the allocator text is checked first
    with pytest.raises(memfit.InvalidInputError, match="expandable"):
        make_workload("no-such-model", batch_size=1, allocator_config="expandable_segments:maybe")
    with pytest.raises(memfit.InvalidInputError, match="GPU 'h9000' is not known"):
        make_workload("no-such-model", batch_size=1, gpu="h9000")


def test_unknown_setting_is_refused_not_ignored():
    with pytest.raises(memfit.InvalidInputError, match=r"Unknown setting.*precison"):
        make_workload(tiny, torch.randn(2, 16), precison="bf16")  # type: ignore[call-arg]


def test_with_batch_size_rescales_a_model_names_batch():
    work = make_workload("bert-base-uncased", batch_size=2, seq_len=32)
    bigger = work.with_batch_size(5)
    assert bigger.batch_size == 5 and bigger.batch_text == "5 x 32 tokens"
    assert bigger.make_batch()["input_ids"].shape == (5, 32)
    assert work.make_batch()["input_ids"].shape == (2, 32)  # the original is unchanged


def test_with_batch_size_uses_the_users_batch_of():
    work = make_workload(tiny, batch_of=lambda n: torch.randn(n, 16), batch_size=1)
    assert work.with_batch_size(7).make_batch().shape == (7, 16)


def test_a_fixed_batch_cannot_be_rescaled():
    work = make_workload(tiny, torch.randn(2, 16))
    with pytest.raises(memfit.InvalidInputError, match="batch is fixed"):
        work.with_batch_size(4)


def test_estimate_takes_a_spec_and_gives_the_same_answer():
    batch = torch.randn(8, 16)
    by_keywords = memfit.estimate(tiny, batch, optimizer="sgd", gpu="1GiB")
    by_spec = memfit.estimate(make_workload(tiny, batch, optimizer="sgd", gpu="1GiB"))
    assert by_spec.to_dict() | {"trace_seconds": 0} == by_keywords.to_dict() | {"trace_seconds": 0}


def test_settings_beside_a_spec_are_refused():
    work = make_workload(tiny, torch.randn(2, 16))
    with pytest.raises(memfit.InvalidInputError, match="precision given beside it"):
        memfit.estimate(work, precision="bf16")


def test_the_spec_is_frozen_and_checked_on_replace():
    work = make_workload(tiny, torch.randn(2, 16))
    with pytest.raises(dataclasses.FrozenInstanceError):
        work.precision = "bf16"  # type: ignore[misc]
    with pytest.raises(memfit.InvalidInputError, match="Precision 'fp8'"):
        dataclasses.replace(work, precision="fp8")  # type: ignore[arg-type]
    with pytest.raises(memfit.InvalidInputError, match="batch_size=0 must be at least 1"):
        dataclasses.replace(work, batch_size=0)


def test_find_batch_size_refuses_a_batch_size():
    with pytest.raises(memfit.InvalidInputError, match="searches the batch size"):
        memfit.find_batch_size("gpt2", seq_len=64, gpu="24GiB", confirm=False, batch_size=8)


def test_validate_refuses_a_target_gpu():
    with pytest.raises(memfit.InvalidInputError, match="this machine's GPU"):
        memfit.validate("gpt2", batch_size=1, seq_len=64, gpu="h100")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_validate_needs_a_gpu():
    with pytest.raises(memfit.NoGPUError, match="no CUDA GPU"):
        memfit.validate("gpt2", batch_size=1, seq_len=64)


def test_command_line_flags_become_the_same_settings():
    args = make_parser().parse_args(
        ["estimate", "gpt2", "-b", "4", "-s", "64", "--checkpointing", "--gpu", "h100"]
    )
    options = workload_options(args)
    assert set(options) <= set(WorkloadOptions.__annotations__)
    assert options == {
        "batch_size": 4,
        "seq_len": 64,
        "precision": "fp32",
        "mode": "train",
        "activation_checkpointing": True,
        "gpu": "h100",
    }
    spec = make_workload(args.model, **options)
    assert isinstance(spec, Workload) and spec.activation_checkpointing


def test_training_settings_for_inference_are_refused():
    with pytest.raises(memfit.InvalidInputError, match="optimizer='sgd' with mode='infer'"):
        make_workload(tiny, torch.randn(2, 16), mode="infer", optimizer="sgd")
    with pytest.raises(memfit.InvalidInputError, match="activation_checkpointing=True with"):
        make_workload(tiny, torch.randn(2, 16), mode="infer", activation_checkpointing=True)


def test_inference_names_no_optimizer_and_says_the_loss_is_computed():
    est = memfit.estimate("gpt2", batch_size=1, seq_len=32, mode="infer")
    assert est.workload.optimizer == "none"
    assert any("computes its loss over the logits" in note for note in est.notes)


def test_json_says_which_gpu_the_trace_assumed():
    data = memfit.estimate(tiny, torch.randn(2, 16), optimizer="sgd").to_dict()
    assert data["gpu"] is None and data["traced_for"] == "H100 80GB"


def test_a_loss_fn_for_inference_is_refused_not_dropped():
    with pytest.raises(memfit.InvalidInputError, match="loss_fn with mode='infer' would be"):
        make_workload(tiny, torch.randn(2, 16), mode="infer", loss_fn=lambda m, b: m(b).sum())


def test_an_image_batch_reads_as_its_shape_not_batch_of():
    # the report's header prefixes "batch ": "batch batch of 2" read badly
    est = memfit.estimate(
        lambda: torch.nn.Conv2d(3, 8, 3), lambda: torch.randn(2, 3, 16, 16), batch_size=2
    )
    assert est.workload.batch == "2 x 3 x 16 x 16"


def test_the_spec_keeps_the_settings_it_is_given():
    """No setting is rewritten after construction: ``make_workload`` reads ``offload=True``
    as 1.0 before it builds the spec, and the spec itself takes the share only."""
    w = make_workload("gpt2", batch_size=1, seq_len=16, offload=True)
    assert w.offload == 1.0
    with pytest.raises(memfit.InvalidInputError, match="offload=True is not a share"):
        dataclasses.replace(w, offload=True)
    with pytest.raises(memfit.InvalidInputError, match="offload_shards=None is not True or"):
        dataclasses.replace(w, offload_shards=None)
    assert dataclasses.replace(w, offload=0.5).offload == 0.5
