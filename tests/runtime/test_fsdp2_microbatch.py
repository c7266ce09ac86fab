"""AutoMicrobatch under FSDP2: 2 CPU processes (gloo), a model sharded with ``fully_shard``. The
guard splits before each step from the memory it measured (a meter whose rise is proportional
to the micro-batch, given here, since a CPU has no CUDA counters); both ranks run the same
number of micro-batches whatever their own batch needs, and end with the parameters of an
unsplit run. An out-of-memory error is not retried: it raises on the rank, with what to change.
A GPT-2 of two sharded blocks shows the rule for longer sequences: split finely the first time,
then by what that step measured.
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
import torch.nn.functional as F
from rank_batches import leave_job, rank_batches
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import memfit
from memfit.runtime import InjectOOM

WORLD = 2
# samples per rank, per step: step 0 learns (whole batches); in step 1 rank 1's batch is twice
# what it measured (2 micro-batches needed there, 1 on rank 0); in step 2 rank 1 needs 3 and
# rank 0 holds only 3 samples
SIZES = [(4, 4), (4, 8), (3, 16)]
ROOM = 40_000  # bytes the fake meter says a step may add
PER_COST = 1_000  # bytes a unit of cost (an element of x) adds
FIXED = 500  # and what every micro-batch adds whatever its size


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(6, 16)
        self.second = torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x)))


class FakeMeter:
    """A micro-batch's rise: FIXED + PER_COST x its elements (set by the loss function)."""

    cost = 0

    def room(self) -> int:
        return ROOM

    def begin_step(self) -> None:
        pass

    def begin(self) -> None:
        pass

    def reading(self) -> tuple[int, int, int]:
        return 0, FIXED + PER_COST * FakeMeter.cost, 0


def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    FakeMeter.cost = batch["x"].numel()
    return F.cross_entropy(model(batch["x"]), batch["y"])


def batches() -> list[list[dict[str, torch.Tensor]]]:
    """``out[step][rank]``, the same on every process."""
    return rank_batches(SIZES)


def _join(rank: int, store: str, meter: FakeMeter) -> DeviceMesh:
    """This rank in the gloo job, the guard given ``meter``; the mesh of every rank."""
    from memfit.runtime import _sharded

    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=60),
    )
    _sharded.meter_for = lambda device, keep_free: meter  # type: ignore[assignment]
    return DeviceMesh("cpu", list(range(WORLD)))


def _worker(rank: int, store: str, out: str) -> None:
    mesh = _join(rank, store, FakeMeter())
    torch.use_deterministic_algorithms(True)
    net = Net().double()
    fully_shard(net.first, mesh=mesh)
    fully_shard(net, mesh=mesh)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    guard = memfit.AutoMicrobatch(net, opt, loss_fn)
    calls: list[int] = []
    net.register_forward_pre_hook(lambda *_: calls.append(len(calls)))
    parts, sizes = [], []
    for step in batches():
        before = len(calls)
        guard.step(step[rank])
        parts.append(len(calls) - before)
        sizes.append(guard.microbatch_size)
    info: dict[str, object] = {"parts": parts, "incidents": len(guard.incidents), "sizes": sizes}
    full = {k: v.full_tensor().detach() for k, v in net.named_parameters()}
    torch.save(full, Path(out) / f"params{rank}.pt")
    # an out-of-memory error in a step, on both ranks at the same point: raised, not retried
    with InjectOOM(net, calls={1}):
        try:
            guard.step(batches()[0][rank])
        except memfit.UnrecoverableOOMError as exc:
            info["error"] = str(exc)
            info["fatal"] = [exc.incident.action, exc.incident.phase]
    (Path(out) / f"info{rank}.json").write_text(json.dumps(info))
    leave_job()


def _reference() -> dict[str, torch.Tensor]:
    net = Net().double()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for step in batches():
        opt.zero_grad(set_to_none=True)
        # FSDP2's update: the average over ranks of each rank's mean loss
        (sum(loss_fn(net, b) for b in step) / WORLD).backward()
        opt.step()
    return {k: v.detach() for k, v in net.named_parameters()}


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_fsdp2_ranks_split_ahead_together_and_match_the_unsplit_run(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    infos = [json.loads((tmp_path / f"info{r}.json").read_text()) for r in range(WORLD)]
    for info in infos:
        # step 0 whole; step 1: rank 1's 8 samples bound at 2 x the 4 measured, over the room;
        # step 2: rank 1 needs 3 parts (6 samples: 36,500 bytes bound), rank 0 holds 3 samples
        assert info["parts"] == [1, 2, 3]
        assert info["incidents"] == 0
    # the largest micro-batch each step used: whole; 4 -> 2 and 8 -> 4; 3 -> 1 and 16 -> 6
    assert [info["sizes"] for info in infos] == [[None, 2, 1], [None, 4, 6]]
    for info in infos:
        assert info["fatal"] == ["fatal", "forward"]
        assert "FSDP2" in info["error"] and "cannot retry" in info["error"]
        assert "microbatch_size=" in info["error"]
    ref = _reference()
    for rank in range(WORLD):
        params = torch.load(tmp_path / f"params{rank}.pt")
        for name, value in ref.items():
            torch.testing.assert_close(params[name], value, rtol=1e-10, atol=1e-12, msg=name)


# a real model: GPT-2 (2 small blocks, each sharded, then the root), sequences of two lengths
LM_STEPS = [((4, 32), (4, 32)), ((4, 32), (4, 64)), ((4, 32), (4, 64))]  # (rows, length)
LM_ROOM = 300_000  # the fake meter's room; a micro-batch rises 1,000 bytes a token


def _lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    FakeMeter.cost = batch["input_ids"].numel()
    return model(**batch).loss


def _lm_batches() -> list[list[dict[str, torch.Tensor]]]:
    g = torch.Generator().manual_seed(3)
    out = []
    for step in LM_STEPS:
        ranks = []
        for rows, length in step:
            ids = torch.randint(0, 1000, (rows, length), generator=g)
            ranks.append({"input_ids": ids, "labels": ids})
        out.append(ranks)
    return out


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        vocab_size=1000,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,  # no dropout: the runs must agree
    )
    return GPT2LMHeadModel(config).double()


class LMMeter(FakeMeter):
    def room(self) -> int:
        return LM_ROOM

    def reading(self) -> tuple[int, int, int]:
        return 0, 1_000 * FakeMeter.cost, 0


def _lm_worker(rank: int, store: str, out: str) -> None:
    mesh = _join(rank, store, LMMeter())
    model = _gpt2()
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = memfit.AutoMicrobatch(model, opt, _lm_loss)
    parts = []
    for step in _lm_batches():
        guard.step(step[rank])
        parts.append(guard._sharded.last_parts if guard._sharded else None)
    full = {k: v.full_tensor().detach() for k, v in model.named_parameters()}
    torch.save(full, Path(out) / f"lm{rank}.pt")
    (Path(out) / f"lm{rank}.json").write_text(json.dumps(parts))
    leave_job()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_gpt2_sharded_splits_a_longer_sequence_finely_once_then_by_its_measurement(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_lm_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    for rank in range(WORLD):
        # step 1 whole (4 x 32 measured: 128,000); step 2: rank 1's rows twice as long, bound
        # as if 4x a row, so 2 rows a micro-batch (256,000 <= 300,000) on both ranks; step 3,
        # the same batch again, bound by its own measurement (2 x 64 rose 128,000): whole
        assert json.loads((tmp_path / f"lm{rank}.json").read_text()) == [1, 2, 1]
    model = _gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in _lm_batches():  # the unsplit update: the mean over ranks of each rank's loss
        opt.zero_grad(set_to_none=True)
        (sum(model(**b).loss for b in step) / WORLD).backward()
        opt.step()
    for rank in range(WORLD):
        got = torch.load(tmp_path / f"lm{rank}.pt")
        for name, value in model.named_parameters():
            diff = float((got[name] - value.detach()).abs().max())
            assert diff < 1e-10, (name, diff)
