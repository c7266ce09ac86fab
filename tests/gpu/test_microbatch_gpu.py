"""AutoMicrobatch on a real GPU: a memory fraction makes GPT-2's whole batch run out of memory;
the guard splits it, and the parameters equal those of the unsplit run without the limit."""

from __future__ import annotations

import pytest
import torch

import memfit

pytestmark = pytest.mark.gpu

BATCH, SEQ, STEPS = 16, 512, 2


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config).cuda().train()


def _loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def _batches() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(50257, (BATCH, SEQ), generator=g).cuda() for _ in range(STEPS)]


@pytest.fixture
def limit_memory():
    """Set the process's memory cap in bytes; removed after the test."""
    total = torch.cuda.get_device_properties(0).total_memory

    def cap(nbytes: int) -> None:
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(nbytes / total)

    yield cap
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.cuda.empty_cache()


def test_gpt2_split_under_a_memory_fraction_matches_the_unsplit_run(limit_memory):
    batches = _batches()
    ref = _gpt2()
    opt = torch.optim.SGD(ref.parameters(), lr=1e-2, momentum=0.9)
    torch.cuda.reset_peak_memory_stats()
    for ids in batches:
        opt.zero_grad(set_to_none=True)
        _loss(ref, ids).backward()
        opt.step()
    peak = torch.cuda.max_memory_allocated()
    expected = [p.detach().clone() for p in ref.parameters()]
    persistent = 3 * sum(
        p.numel() * p.element_size() for p in ref.parameters()
    )  # + grad + momentum
    del ref, opt

    limit_memory(int(persistent + 0.4 * (peak - persistent)))
    model = _gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    guard = memfit.AutoMicrobatch(model, opt, _loss, grow_after=None)
    for ids in batches:
        guard.step(ids)
    assert guard.incidents, "the memory fraction should have made the whole batch fail"
    assert guard.microbatch_size is not None and guard.microbatch_size < BATCH
    first = guard.incidents[0]
    assert (
        first.memory is not None and first.memory.allocated > 0 and first.memory.device == "cuda:0"
    )
    for p, q in zip(model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.detach(), q, rtol=1e-4, atol=1e-5)


def test_a_single_sample_that_cannot_fit_raises_with_the_memory_report(limit_memory):
    model = _gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    limit_memory(int(2.05 * params))  # parameters and gradients, and almost nothing else
    guard = memfit.AutoMicrobatch(model, opt, _loss)
    with pytest.raises(memfit.UnrecoverableOOMError) as info:
        guard.step(torch.zeros(4, SEQ, dtype=torch.long, device="cuda"))
    message = str(info.value)
    assert "does not fit even as micro-batches of 1 (a single sample)" in message
    assert "allocated and" in message and "reserved of" in message and "cuda:0" in message
    assert all(p.grad is None for p in model.parameters())
    assert [i.microbatch_after for i in guard.incidents] == [2, 1, None]
