"""A DDP rank's step (``strategy="ddp"``, ``world_size=N``): traced on
PyTorch's fake process group with its gradient buckets, the group torn down after; the
strategies and settings not estimated yet refused."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from tiny_gpt2 import tiny_gpt2, token_batch
from torch import nn

import memfit
from memfit import InvalidInputError
from memfit.cli import main


def _gpt2() -> nn.Module:
    return tiny_gpt2(n_layer=2)


def _batch() -> dict[str, torch.Tensor]:
    return token_batch()


def test_a_ddp_rank_holds_its_gradient_buckets_besides_the_step() -> None:
    plain = memfit.estimate(_gpt2, _batch, gpu="H200")
    ddp = memfit.estimate(_gpt2, _batch, gpu="H200", strategy="ddp", world_size=4)
    grads = sum(p.numel() * 4 for p in _gpt2().parameters())
    # one flat fp32 bucket of every gradient, held from DDP's construction on, and in the
    # second step the first step's too (NCCL's watchdog may hold them until then: measured)
    assert ddp.peak_allocated - plain.peak_allocated == pytest.approx(2 * grads, abs=2**20)
    one = memfit.estimate(_gpt2, _batch, gpu="H200", strategy="ddp", world_size=4, steps=1)
    assert one.peak_allocated - plain.peak_allocated <= grads + 2**20
    assert any(n.startswith("DDP on 4 ranks") for n in ddp.notes)
    assert not dist.is_initialized()  # the fake group lived as long as the trace


def test_the_world_size_does_not_change_a_ddp_ranks_estimate() -> None:
    peaks = {
        n: memfit.estimate(_gpt2, _batch, strategy="ddp", world_size=n).peak_reserved
        for n in (1, 8)
    }
    assert peaks[1] == peaks[8]


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"strategy": "horovod", "world_size": 4}, "not a data-parallel strategy"),
        ({"world_size": 4}, "world_size=4 without a strategy"),
        ({"strategy": "ddp", "world_size": 0}, "world_size=0 is not a number of ranks"),
        ({"strategy": "ddp", "mode": "infer"}, "DDP's buckets hold gradients"),
    ],
)
def test_what_is_not_estimated_is_refused(settings: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        memfit.estimate(_gpt2, _batch, **settings)  # type: ignore[arg-type]


def test_the_command_line_takes_gpus_and_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["estimate", "gpt2", "-b", "2", "-s", "128", "--gpus", "2", "--strategy", "ddp"]) == 0
    )
    assert "DDP on 2 ranks" in capsys.readouterr().out.replace("\n", " ")
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "gpt2", "--strategy", "fsdp"])
    assert exit_info.value.code == 2


def test_ddps_broadcast_of_the_parameters_at_construction_is_traced() -> None:
    # DDP's default init_sync: the parameters flattened into buffers of about 250 MB, broadcast
    # from rank 0 and freed (on the H200: 270.9 and 226.8 MB for GPT-2, freed at once)
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload import make_workload

    work = make_workload(_gpt2, _batch, strategy="ddp", world_size=2)
    trace = trace_workload(work, resolve_gpu("h200"))
    setup = trace.events[: trace.steps_start]
    freed = {e.block for e in setup if e.kind == "free"}
    transient = sum(e.size for e in setup if e.kind == "alloc" and e.block in freed)
    params = sum(p.numel() * 4 for p in _gpt2().parameters())
    assert transient >= params


def test_a_ddp_rank_counts_nccls_memory_outside_pytorch() -> None:
    from memfit.estimator._estimate import NCCL_ONE_RANK

    plain = memfit.estimate(_gpt2, _batch, gpu="H200")
    ddp = memfit.estimate(_gpt2, _batch, gpu="H200", strategy="ddp")
    assert ddp.non_pytorch - plain.non_pytorch == NCCL_ONE_RANK == 490 * 2**20


def test_a_plan_of_a_ddp_rank_says_what_it_left_out() -> None:
    def batch_of(n: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 1000, (n, 256))
        return {"input_ids": ids, "labels": ids}

    plan = memfit.plan(
        _gpt2,
        batch_of=batch_of,
        batch_size=4,
        budget="H200",
        strategy="ddp",
        world_size=2,
        precisions=("fp32",),
        checkpointing=(False,),
        optimizers=("adamw-fused",),
        offloads=(),
        workers=1,
    )
    assert any(n.startswith("planned one rank of DDP on 2") for n in plan.notes)
    chosen = plan.chosen
    assert chosen is not None
    c = chosen.candidate
    plain = memfit.estimate(  # the same configuration, not data-parallel: no buckets
        _gpt2,
        batch_of=batch_of,
        batch_size=c.micro_batch,
        accumulation=c.accumulation,
        optimizer=c.optimizer,
        gpu="H200",
    )
    assert chosen.peak_allocated > plain.peak_allocated


def test_the_header_and_json_say_a_rank_and_its_offload(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["estimate", "gpt2", "-b", "2", "-s", "128", "--gpus", "4", "--strategy", "ddp"]
    assert main([*args, "--offload", "0.5"]) == 0
    out = capsys.readouterr()
    text = " ".join(out.out.split())
    assert "offload 50% of the blocks" in text and "parallel DDP, rank of 4" in text
    assert "Warning" not in out.err  # DDP's timing statistics, which meta cannot take, are off
    assert main([*args, "--json"]) == 0
    import json

    workload = json.loads(capsys.readouterr().out)["workload"]
    assert (workload["strategy"], workload["world_size"], workload["offload"]) == ("ddp", 4, 0.0)


def test_a_zero_strategy_without_deepspeed_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "deepspeed.runtime.engine", None)  # import fails
    with pytest.raises(memfit.MissingExtraError, match=r"pip install 'memfit\[zero\]'"):
        memfit.estimate(_gpt2, _batch, strategy="zero2", world_size=2)


def test_a_ddp_rank_of_several_is_validated_as_one_rank() -> None:
    from memfit.technique.data_parallel import parallel_group

    with (
        pytest.raises(InvalidInputError, match=r"validated as one rank.*world_size=1"),
        parallel_group("ddp", 4, "cuda"),
    ):
        pass


def test_a_sharded_rank_on_a_device_runs_on_a_fake_group_with_a_launchers_variables() -> None:
    import os

    import torch.distributed as dist

    from memfit.technique.data_parallel import parallel_group

    before = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    with parallel_group("fsdp2", 4, "cpu"):
        assert dist.get_world_size() == 4 and dist.get_rank() == 0
        assert os.environ["WORLD_SIZE"] == "4" and os.environ["RANK"] == "0"
    assert not dist.is_initialized()
    assert {k: os.environ.get(k) for k in before} == before
