"""AutoMicrobatch under DDP on two GPUs (NCCL): rank 1 is held to a memory fraction under which
its whole batch runs out of memory for real; both ranks split together and end with the
parameters of the unsplit DDP run. Needs 2 CUDA GPUs (the nvidia-h200-x2 machine)."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tiny_lm import TinyLM as _TinyLM
from tiny_lm import next_token_loss

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"
    ),
]

WORLD, BATCH, SEQ, VOCAB, STEPS = 2, 16, 512, 8192, 2


class TinyLM(_TinyLM):
    def __init__(self) -> None:
        super().__init__(VOCAB, layers=6)


def loss_fn(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return next_token_loss(model, ids, VOCAB)


def _batches(rank: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return [torch.randint(VOCAB, (BATCH, SEQ), generator=g).cuda() for _ in range(STEPS)]


def _model(rank: int) -> tuple[torch.nn.Module, torch.nn.Module, torch.optim.Optimizer]:
    net = TinyLM().cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank])
    return net, ddp, torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)


def _worker(rank: int, store: str, out: str) -> None:
    import memfit

    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=120),
    )
    batches = _batches(rank)
    net, ddp, opt = _model(rank)
    torch.cuda.reset_peak_memory_stats()
    for ids in batches:  # the unsplit DDP run, no limit
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp, ids).backward()
        opt.step()
    peak = torch.cuda.max_memory_allocated()
    expected = [p.detach().clone() for p in net.parameters()]
    persistent = 3 * sum(p.numel() * p.element_size() for p in net.parameters())
    del net, ddp, opt
    torch.cuda.empty_cache()
    if rank == 1:  # only rank 1 runs short of memory
        total = torch.cuda.get_device_properties(rank).total_memory
        cap = persistent + 0.4 * (peak - persistent)
        torch.cuda.set_per_process_memory_fraction(cap / total, rank)
    net, ddp, opt = _model(rank)
    guard = memfit.AutoMicrobatch(ddp, opt, loss_fn, grow_after=None)
    for ids in batches:
        guard.step(ids)
    diffs = [
        float((p.detach() - q).abs().max()) for p, q in zip(net.parameters(), expected, strict=True)
    ]
    scale = max(float(q.abs().max()) for q in expected)
    info = {
        "incidents": [[i.action, i.here, i.phase, i.microbatch_after] for i in guard.incidents],
        "microbatch": guard.microbatch_size,
        "max_diff": max(diffs),
        "scale": scale,
        "peak_unsplit": peak,
    }
    (Path(out) / f"info{rank}.json").write_text(json.dumps(info))
    dist.barrier()
    dist.destroy_process_group()


def test_ranks_split_together_on_a_real_oom_and_match_the_unsplit_run(tmp_path):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # the lent machines keep NVLink multicast off
    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    infos = [json.loads((tmp_path / f"info{r}.json").read_text()) for r in range(WORLD)]
    print(json.dumps(infos))
    assert infos[1]["incidents"], "the memory fraction should have made rank 1's batch fail"
    # both ranks saw the same incidents, and only rank 1's were its own
    assert [i[:1] + i[2:] for i in infos[0]["incidents"]] == [
        i[:1] + i[2:] for i in infos[1]["incidents"]
    ]
    assert not any(i[1] for i in infos[0]["incidents"]) and all(i[1] for i in infos[1]["incidents"])
    assert infos[0]["microbatch"] == infos[1]["microbatch"] < BATCH
    for info in infos:
        assert info["max_diff"] <= 1e-4 * max(1.0, info["scale"]), info
