"""Activation offload (``offload=``, ``memfit.offload_activations``): the step computes what it
computed without it, the blocks' saved tensors leave the device between forward and backward,
the trace sees the same program (memory falls block by block; copies are counted), and what it
cannot do is refused."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.technique.checkpointing import checkpoint_blocks, find_blocks
from memfit.technique.offload import offload_blocks, offloader_of


def _gpt2(layers: int = 4) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=layers,
            n_embd=128,
            n_head=4,
            vocab_size=1000,
            n_positions=256,
            bos_token_id=0,
            eos_token_id=0,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    )


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (4, 256), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids}


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    loss = model(**_batch()).loss
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gradients_are_the_same_with_every_block_offloaded() -> None:
    expected = _grads(_gpt2())
    model = _gpt2()
    offload = offload_blocks(model, 1.0, min_bytes=0)
    assert offload.offloaded == find_blocks(model)
    got = _grads(model)
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        assert torch.equal(got[name], grad), name


def test_the_saved_tensors_leave_the_block_until_the_backward_needs_them() -> None:
    model = _gpt2(layers=2)
    offload = offload_blocks(model, 1.0, min_bytes=0)
    packed: list[int] = []
    unpacked: list[int] = []
    pack, unpack = offload._pack, offload._unpack

    def counting_pack(group: object, t: torch.Tensor) -> object:
        out = pack(group, t)  # type: ignore[arg-type]
        packed.append(0 if out is t else 1)
        return out

    def counting_unpack(saved: object) -> torch.Tensor:
        unpacked.append(0 if isinstance(saved, torch.Tensor) else 1)
        return unpack(saved)

    offload._pack = counting_pack  # type: ignore[method-assign]
    offload._unpack = counting_unpack  # type: ignore[method-assign]
    loss = model(**_batch()).loss
    assert sum(packed) > 10  # the blocks' activations went to host copies
    assert not offload._pending or len(offload._pending) == 1  # all but the last let go
    loss.backward()
    assert sum(unpacked) == sum(packed)  # each came back once
    assert not offload._pending


def test_remove_puts_the_forwards_back_and_a_second_offload_is_refused() -> None:
    model = _gpt2(layers=2)
    blocks = find_blocks(model)
    offload = offload_blocks(model, 0.5)
    assert offload.offloaded == [blocks[1]]
    assert all("forward" in b.__dict__ for b in blocks)
    with pytest.raises(InvalidInputError, match="already has memfit's activation offload"):
        offload_blocks(model, 1.0)
    offload.remove()
    assert not any("forward" in b.__dict__ for b in blocks)
    assert offloader_of(model) is None


def test_the_blocks_checkpointed_are_not_offloaded() -> None:
    model = _gpt2()
    checkpointed = checkpoint_blocks(model, selective=False, fraction=0.5)
    offload = offload_blocks(model, 1.0)
    assert offload.offloaded and not set(map(id, offload.offloaded)) & set(map(id, checkpointed))
    assert len(offload.offloaded) == 2


def test_the_estimate_falls_block_by_block_and_counts_the_copies() -> None:
    estimates = [
        memfit.estimate(_gpt2, _batch, offload=share, gpu="80GiB") for share in (False, 0.5, 1.0)
    ]
    peaks = [e.peak_allocated for e in estimates]
    assert peaks[0] > peaks[1] > peaks[2], peaks


def test_offload_with_partial_checkpointing_saves_more_than_either() -> None:
    both = memfit.estimate(_gpt2, _batch, activation_checkpointing=0.5, offload=1.0)
    checkpointed = memfit.estimate(_gpt2, _batch, activation_checkpointing=0.5)
    assert both.peak_allocated < checkpointed.peak_allocated


@pytest.mark.parametrize("value", [1.5, -0.5, 0, "all"])
def test_a_value_that_is_no_share_is_refused(value: object) -> None:
    if value == 0:  # zero is no offload, not an error
        memfit.estimate(_gpt2, _batch, offload=value, steps=1)  # type: ignore[arg-type]
        return
    with pytest.raises(InvalidInputError, match=r"offload=.* is not a share of blocks"):
        memfit.estimate(_gpt2, _batch, offload=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"mode": "infer"}, "inference saves no activations"),
        ({"activation_checkpointing": True}, "every block is checkpointed"),
        ({"activation_checkpointing": "selective"}, "every block is checkpointed"),
    ],
)
def test_where_offload_would_be_ignored_it_is_refused(
    settings: dict[str, object], why: str
) -> None:
    with pytest.raises(InvalidInputError, match=f"offload=1.0 would be ignored here: {why}"):
        memfit.estimate(_gpt2, _batch, offload=True, **settings)  # type: ignore[arg-type]


def test_a_model_with_its_own_checkpointing_is_refused() -> None:
    model = _gpt2(layers=2)
    model.gradient_checkpointing_enable()
    with pytest.raises(InvalidInputError, match="gradient checkpointing switched on"):
        offload_blocks(model, 1.0)


def test_a_second_backward_through_the_same_graph_brings_the_tensors_back_again() -> None:
    model = _gpt2(layers=2)
    offload_blocks(model, 1.0, min_bytes=0)
    loss = model(**_batch()).loss
    loss.backward(retain_graph=True)
    first = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    loss.backward()
    for name, grad in first.items():
        assert torch.equal(dict(model.named_parameters())[name].grad, grad), name


def test_under_no_grad_nothing_is_offloaded() -> None:
    model = _gpt2(layers=2)
    offload = offload_blocks(model, 1.0, min_bytes=0)
    with torch.no_grad():
        model(**_batch())
    assert not offload._pending and not offload._calls


def test_a_forward_that_fails_lets_go_of_what_the_blocks_before_held() -> None:
    # AutoMicrobatch retries after an out-of-memory error: the earlier blocks' tensors, held
    # until the next block's end, must not be held into the retry
    model = _gpt2(layers=3)
    offload = offload_blocks(model, 1.0, min_bytes=0)
    inside_last = find_blocks(model)[-1].mlp  # the error inside the last block's forward

    def fail(module: nn.Module, args: object) -> None:
        raise RuntimeError("CUDA out of memory (simulated)")

    handle = inside_last.register_forward_pre_hook(fail)
    with pytest.raises(RuntimeError, match="simulated"):
        model(**_batch())
    assert not offload._pending
    handle.remove()
    loss = model(**_batch()).loss  # and the next forward and backward run
    loss.backward()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"share": 0}, r"share=0 offloads nothing"),
        ({"share": 2.0}, r"offload=2.0 is not a share of blocks"),
        ({"min_bytes": -1}, r"min_bytes=-1 is not a size in bytes"),
        ({"min_bytes": "1MB"}, r"min_bytes='1MB' is not a size in bytes"),
    ],
)
def test_offload_activations_refuses_what_is_no_share_or_size(
    kwargs: dict[str, object], match: str
) -> None:
    model = _gpt2(layers=2)
    with pytest.raises(InvalidInputError, match=match):
        memfit.offload_activations(model, **kwargs)  # type: ignore[arg-type]
    assert not any("forward" in m.__dict__ for m in model.modules())  # nothing changed


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["estimate", "gpt2", "--offload", "1.5"], "1.5 is not between 0 and 1"),
        (["estimate", "gpt2", "--offload", "half"], "half"),
        (["estimate", "gpt2", "--gpus", "0"], "0"),
        (["plan", "gpt2", "-b", "8", "--gpu", "24GiB", "--offloads", "1,x"], "x"),
    ],
)
def test_the_command_line_refuses_bad_offload_and_rank_flags(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from memfit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_offload_with_full_checkpointing_on_the_command_line_is_refused_without_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from memfit.cli import main

    code = main(["estimate", "gpt2", "-b", "2", "-s", "64", "--checkpointing", "--offload"])
    err = capsys.readouterr().err
    assert code != 0 and "every block is checkpointed" in " ".join(err.split())
    assert "Traceback" not in err
