"""AutoMicrobatch under FSDP2 on CUDA with the allocator's own counters.

* Two ranks on two GPUs (NCCL), each held to a memory fraction in which rank 1's long batch does
  not fit whole by what the guard measured: both ranks split it ahead, together; the measured
  rise stays within the bound; the parameters end as the unsplit, uncapped run's. Gloo with both
  ranks on one GPU crashed (SIGSEGV) in FSDP2's collectives on CUDA tensors (torch 2.11,
  2026-12-03), and NCCL takes one rank per GPU: this one needs 2 GPUs.
* On one GPU, the split's own parts with the CUDA meter: the room under
  ``set_per_process_memory_fraction``, the rise of real micro-batches against their bound, the
  count chosen (a world of one rank, NCCL).
"""

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
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")

WORLD, BATCH, VOCAB = 2, 16, 4096
LENGTHS = [(256, 256), (256, 256), (256, 1024)]  # per step, per rank


class TinyLM(_TinyLM):
    def __init__(self) -> None:
        super().__init__(VOCAB, layers=4)


def loss_fn(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return next_token_loss(model, ids, VOCAB)


def _sharded(device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    net = TinyLM().to(device)
    mesh = init_device_mesh("cuda", (WORLD,))
    for layer in net.body.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net, torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)


def _worker(rank: int, store: str, out: str) -> None:
    import memfit

    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=120),
    )
    g = torch.Generator().manual_seed(100 + rank)
    batches = [
        torch.randint(VOCAB, (BATCH, lengths[rank]), generator=g).to(device) for lengths in LENGTHS
    ]
    net, opt = _sharded(device)
    for ids in batches:  # the unsplit run, no limit
        opt.zero_grad(set_to_none=True)
        loss_fn(net, ids).backward()
        opt.step()
    expected = {k: v.full_tensor().detach().clone() for k, v in net.named_parameters()}
    del net, opt
    torch.cuda.empty_cache()

    net, opt = _sharded(device)
    guard = memfit.AutoMicrobatch(net, opt, loss_fn)
    guard.step(batches[0])  # measured whole: the bound the rest is split by
    sharded = guard._sharded
    assert sharded is not None and sharded.meter is not None
    rise = sharded.last_peak
    # room for 2.5 x that rise (keep_free's 5% of the cap left out of it)
    total = torch.cuda.get_device_properties(device).total_memory
    cap = (torch.cuda.memory_allocated(device) + 2.5 * rise) / (1 - sharded.keep_free)
    torch.cuda.set_per_process_memory_fraction(cap / total, device)
    room = sharded.meter.room()
    before = sharded.bound(2.0, float(LENGTHS[-1][rank]))  # rank 1: 2 rows of 1024
    whole = sharded.bound(*sharded.size(batches[-1]))
    parts = []
    for ids in batches[1:]:
        guard.step(ids)
        parts.append(sharded.last_parts)
    info = {
        "parts": parts,
        "room": room,
        "rise": rise,
        "last_rise": sharded.last_peak,
        "last_bound": before,
        "whole_bound": whole,
    }
    got = {k: v.full_tensor().detach() for k, v in net.named_parameters()}
    info["max_diff"] = max(float((got[k] - v).abs().max()) for k, v in expected.items())
    (Path(out) / f"info{rank}.json").write_text(json.dumps(info))
    dist.destroy_process_group()


@two_gpus
def test_fsdp2_ranks_split_ahead_within_the_real_allocators_room(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    infos = [json.loads((tmp_path / f"info{r}.json").read_text()) for r in range(WORLD)]
    for rank, info in enumerate(infos):
        # step 1 whole on both; step 2: rank 1's rows 4x longer than any measured, bound as if
        # their memory grew with the square: 2 rows a micro-batch in the room of 2.5x the 16
        # short rows' rise, so both ranks run 8 micro-batches
        assert info["parts"] == [1, 8], (rank, info)
        assert info["last_rise"] <= info["room"], (rank, info)
        assert info["max_diff"] < 1e-4, (rank, info)
    assert infos[1]["whole_bound"] > infos[1]["room"]
    assert infos[1]["last_rise"] <= infos[1]["last_bound"] <= infos[1]["room"]


def _split(ids: torch.Tensor, n: int, parts: int) -> tuple[list[torch.Tensor], list[int]]:
    chunks = list(ids.tensor_split(parts))
    return chunks, [len(c) for c in chunks]


def test_the_cuda_meter_bounds_real_micro_batches_within_a_fraction(tmp_path: Path) -> None:
    from memfit.runtime._sharded import ShardedSplit

    dist.init_process_group(
        "nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        device = torch.device("cuda", 0)
        net = TinyLM().to(device)
        opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
        split = ShardedSplit(net, None, None)
        assert split.meter is not None

        def run(ids: torch.Tensor, parts: int) -> None:
            split.begin_step()
            for chunk in ids.tensor_split(parts):
                with split.watch(chunk):
                    loss_fn(net, chunk).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        g = torch.Generator().manual_seed(1)
        short = torch.randint(VOCAB, (BATCH, 256), generator=g).to(device)
        long = torch.randint(VOCAB, (BATCH, 1024), generator=g).to(device)
        run(short, 1)
        run(short, 1)  # the momentum buffers exist from here on
        rise = split.last_peak
        total = torch.cuda.get_device_properties(device).total_memory
        cap = (torch.cuda.memory_allocated(device) + 2.5 * rise) / (1 - split.keep_free)
        torch.cuda.set_per_process_memory_fraction(cap / total, device)
        try:
            room = split.meter.room()
            assert abs(room - 2.5 * rise) < 0.01 * rise + (2 << 20)  # the fraction's cap, less 5%
            # 16 rows 4x as long as any measured: bound as if a row took up to 16x, so 2 rows a
            # micro-batch fit the room of 2.5x the 16 short rows' rise
            assert split.bound(*split.size(long)) > room
            parts = split.parts(long, BATCH, 1, _split, BATCH)
            assert parts == 8
            before = split.bound(2.0, 1024.0)  # predicted before the long rows ever ran
            run(long, parts)
            assert split.measured[-1][:2] == (2.0, 1024.0)
            # every micro-batch, the later ones beside the first one's gradients, within it
            assert split.last_peak <= before <= room, (split.last_peak, before, room)
            # measured once at that length, the next such batch is bounded by it: fewer parts
            again = split.parts(long, BATCH, 1, _split, BATCH)
            assert 2 <= again < parts
            before = split.bound(*split.size(long.tensor_split(again)[0]))
            run(long, again)
            assert split.last_peak <= before <= room, (split.last_peak, before, room)
            assert torch.cuda.max_memory_reserved(device) <= cap
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    finally:
        dist.destroy_process_group()
