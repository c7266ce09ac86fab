"""Offloading the inputs of checkpointed blocks (``offload_checkpoints=True``, ``checkpoints=``):
the step computes what it computed without, only the inputs leave the device, the estimate goes
below full checkpointing's, and where host memory is short the offload stops before pinning it."""

from __future__ import annotations

import pytest
import torch
from tests.workload.tiny_gpt2 import tiny_gpt2
from torch import nn

import memfit
from memfit import HostMemoryError, InvalidInputError
from memfit.technique.checkpointing import checkpoint_blocks, find_blocks
from memfit.technique.offload import offload_blocks, offloader_of


def _gpt2(layers: int = 4) -> nn.Module:
    torch.manual_seed(0)
    model = tiny_gpt2(n_layer=layers)
    for m in model.modules():  # the recompute must draw the same dropout masks: none
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


def _batch(n: int = 4) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (n, 256), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids}


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    model(**_batch()).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_inputs_alone_leave_and_the_gradients_are_the_same() -> None:
    expected = _grads(_gpt2())
    model = _gpt2()
    checkpoint_blocks(model, selective=False)
    offload = offload_blocks(model, 0.0, checkpoints=True, min_bytes=0)
    assert offload.offloaded == offload.checkpointed == find_blocks(model)
    packed: list[tuple[int, ...]] = []
    pack = offload._pack

    def counting(group: object, t: torch.Tensor) -> object:
        out = pack(group, t)  # type: ignore[arg-type]
        if out is not t:
            packed.append(tuple(t.shape))
        return out

    offload._pack = counting  # type: ignore[method-assign]
    got = _grads(model)
    # one tensor a block, its hidden state: what checkpointing keeps for the recompute
    assert packed == [(4, 256, 128)] * 4
    for name, grad in expected.items():
        assert torch.equal(got[name], grad), name


def test_partial_checkpointing_offloads_the_inputs_and_the_other_blocks() -> None:
    model = _gpt2()
    checkpointed = checkpoint_blocks(model, selective=False, fraction=0.5)
    offload = offload_blocks(model, 1.0, checkpoints=True)
    assert offload.offloaded == find_blocks(model)
    assert offload.checkpointed == checkpointed


def test_the_estimate_goes_below_full_checkpointing_and_says_what_is_offloaded() -> None:
    # at 32 x 256 the blocks' inputs (4 MiB each) are where the peak is
    full = memfit.estimate(_gpt2, _batch(32), activation_checkpointing=True, gpu="80GiB")
    both = memfit.estimate(
        _gpt2, _batch(32), activation_checkpointing=True, offload_checkpoints=True, gpu="80GiB"
    )
    assert full.peak_allocated - both.peak_allocated >= 4 << 20
    assert both.workload.offload_checkpoints and both.to_dict()["workload"]["offload_checkpoints"]
    text = " ".join(both.notes)
    assert "the inputs of 4 checkpointed blocks (of 4 blocks)" in text
    # GPT-2's own switch is replaced by memfit's wrapping, and the estimate says so
    assert "in place of the model's own switch" in text


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({}, "no block is checkpointed"),
        ({"activation_checkpointing": True, "mode": "infer"}, "ignored"),
    ],
)
def test_where_there_are_no_checkpointed_inputs_it_is_refused(
    settings: dict[str, object], why: str
) -> None:
    with pytest.raises(InvalidInputError, match=why):
        memfit.estimate(_gpt2, _batch, offload_checkpoints=True, **settings)  # type: ignore[arg-type]


def test_a_value_that_is_not_a_bool_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"offload_checkpoints='yes' is not True or False"):
        memfit.estimate(
            _gpt2,
            _batch,
            activation_checkpointing=True,
            offload_checkpoints="yes",  # type: ignore[arg-type]
        )


def test_offload_activations_refuses_checkpoints_without_memfit_checkpointing() -> None:
    model = _gpt2(layers=2)
    with pytest.raises(InvalidInputError, match="none of GPT2LMHeadModel's blocks is checkpointed"):
        memfit.offload_activations(model, 0.0, checkpoints=True)
    with pytest.raises(InvalidInputError, match="checkpoints=1 is not True or False"):
        memfit.offload_activations(model, checkpoints=1)  # type: ignore[arg-type]
    assert offloader_of(model) is None


def test_the_host_copies_stop_before_the_host_runs_short() -> None:
    model = _gpt2(layers=3)
    offload = offload_blocks(model, 1.0, min_bytes=0)
    offload.free_host = lambda: (1 << 30) + (8 << 20)  # 8 MiB above the reserve
    with pytest.raises(HostMemoryError, match=r"would leave the host less than 1\.00 GiB free"):
        model(**_batch())
    assert not offload._pending  # what the blocks before held is let go (AutoMicrobatch)


def test_the_host_copies_are_counted_until_autograd_lets_go_of_them() -> None:
    model = _gpt2(layers=2)
    offload = offload_blocks(model, 1.0, min_bytes=0)
    offload.free_host = lambda: 1 << 40
    loss = model(**_batch()).loss
    taken = offload._host_live
    assert taken > 0 and offload._host_most == taken
    loss.backward()
    del loss
    assert offload._host_live == 0 and offload._host_most == taken
    # a second step takes what the first left in the pinned cache: no new high
    offload.free_host = lambda: 0  # would refuse anything new
    model(**_batch()).loss.backward()
    assert offload._host_most == taken


def test_the_command_line_refuses_checkpoint_offload_without_checkpointing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memfit.cli import main

    code = main(["estimate", "gpt2", "-b", "2", "-s", "64", "--offload-checkpoints"])
    err = " ".join(capsys.readouterr().err.split())
    assert code != 0 and "no block is checkpointed" in err and "Traceback" not in err
