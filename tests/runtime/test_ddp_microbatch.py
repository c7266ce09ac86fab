"""AutoMicrobatch under DistributedDataParallel: 2 CPU processes (gloo), out-of-memory errors on
rank 1 only; both ranks retry together and end with the parameters of an unsplit run."""

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

import memfit
from memfit.runtime import InjectOOM

WORLD = 2
SIZES = [(8, 8), (8, 6), (8, 8)]  # samples per rank, per step: uneven in step 1


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
        )
        self.unused = torch.nn.Linear(2, 2)  # no gradient on any rank: must stay None
        self.register_buffer("calls", torch.zeros((), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(batch["x"]), batch["y"])


def batches() -> list[list[dict[str, torch.Tensor]]]:
    """``out[step][rank]``, the same on every process."""
    return rank_batches(SIZES)


def _worker(rank: int, store: str, out: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=30),
    )
    torch.use_deterministic_algorithms(True)
    net = Net().double()
    if rank == 0:
        net.calls.fill_(5.0)  # DDP broadcasts rank 0's buffers: rank 1 must end with 5 too
    model = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    guard = memfit.AutoMicrobatch(model, opt, loss_fn, grow_after=None)
    with InjectOOM(net, max_samples=3 if rank == 1 else None, phase="backward"):
        for step in batches():
            guard.step(step[rank])
    info = {
        "incidents": [(i.action, i.here, i.phase, i.microbatch_after) for i in guard.incidents],
        "unused_grad": net.unused.weight.grad is None,
        "buffer": float(net.calls),
    }
    torch.save({k: v.detach() for k, v in net.named_parameters()}, Path(out) / f"params{rank}.pt")
    # an optimizer step that runs out on rank 1 only: both ranks raise instead of hanging
    with InjectOOM(net, optimizer=opt, optimizer_steps={1} if rank == 1 else ()):
        guard2 = memfit.AutoMicrobatch(model, opt, loss_fn)
        try:
            guard2.step(batches()[0][rank])
        except memfit.UnrecoverableOOMError as exc:
            info["optimizer_error"] = [exc.incident.phase, exc.incident.here]
    (Path(out) / f"info{rank}.json").write_text(json.dumps(info))
    leave_job()


def _reference() -> dict[str, torch.Tensor]:
    net = Net().double()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for step in batches():
        opt.zero_grad(set_to_none=True)
        # DDP's update: the average over ranks of each rank's mean loss
        (sum(loss_fn(net, b) for b in step) / WORLD).backward()
        opt.step()
    return {k: v.detach() for k, v in net.named_parameters()}


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_ddp_ranks_agree_on_the_split_and_match_the_unsplit_run(tmp_path):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    infos = [json.loads((tmp_path / f"info{r}.json").read_text()) for r in range(WORLD)]
    expected = [["split", 4, "backward"], ["split", 2, "backward"]]  # 8 -> 4 -> 2 on both ranks
    for rank, info in enumerate(infos):
        got = [[action, after, phase] for action, here, phase, after in info["incidents"]]
        assert got == expected
        assert all(here == (rank == 1) for _, here, _, _ in info["incidents"])
        assert info["unused_grad"] is True
        assert info["buffer"] == 5.0
        assert info["optimizer_error"] == ["optimizer", rank == 1]
    ref = _reference()
    for rank in range(WORLD):
        params = torch.load(tmp_path / f"params{rank}.pt")
        for name, value in ref.items():
            torch.testing.assert_close(params[name], value, rtol=1e-10, atol=1e-12, msg=name)
