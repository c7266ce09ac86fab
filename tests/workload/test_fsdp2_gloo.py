"""FSDP2 run for real on CPU processes (gloo, three ranks) against memfit's trace of each rank:
the padded shards every rank holds and the optimizer states of its own rows agree to the byte.
Three ranks, so that GPT-2's 1,000 word embeddings split 334, 334 and 332 and the last rank is
not rank 0's twin."""

from __future__ import annotations

import pytest
import torch
from tiny_gpt2 import gloo_ranks, tiny_gpt2, token_batch
from torch import nn

from memfit._events import Category
from memfit._gpus import resolve_gpu
from memfit.trace import trace_workload
from memfit.workload import make_workload

WORLD = 3
RANK = """
import json, os, torch, torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from transformers import GPT2Config, GPT2LMHeadModel
from memfit.technique.data_parallel import shard_model
dist.init_process_group("gloo")
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000,
                                   n_positions=128))
shard_model(model, DeviceMesh("cpu", list(range(dist.get_world_size()))))
held = sum(p._local_tensor.untyped_storage().nbytes() for p in model.parameters())
optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
ids = torch.randint(0, 1000, (2, 128))
model(input_ids=ids, labels=ids).loss.backward()
optimizer.step()
states = sum(v._local_tensor.untyped_storage().nbytes() for s in optimizer.state.values()
             for k, v in s.items() if k != "step")
print("RESULT " + json.dumps([dist.get_rank(), held, states]), flush=True)
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # gloo's threads can abort an unjoined teardown
"""


def _gpt2() -> nn.Module:
    return tiny_gpt2(n_layer=2, n_embd=64, n_positions=128)


def _batch() -> dict[str, torch.Tensor]:
    return token_batch(2, 128)


def _gloo() -> dict[int, tuple[int, int]]:
    return {rank: (held, states) for rank, (held, states) in gloo_ranks(RANK, WORLD).items()}


def _traced(rank: int) -> tuple[int, int]:
    workload = make_workload(
        _gpt2, _batch, strategy="fsdp2", world_size=WORLD, optimizer="adamw-foreach"
    )
    trace = trace_workload(workload, resolve_gpu("h200"), rank=rank)
    live: dict[int, tuple[Category, int]] = {}
    held = 0
    for i, event in enumerate(trace.events):
        if i == trace.steps_start:
            held = sum(n for c, n in live.values() if c is Category.PARAMETER)
        if event.kind == "alloc":
            live[event.block] = (trace.infos[event.info].category, event.size)
        elif event.kind == "free":
            live.pop(event.block, None)
    # exp_avg and exp_avg_sq (the step counters are host tensors on a GPU too)
    states = sum(n for c, n in live.values() if c is Category.OPTIMIZER_STATE)
    return held, states


def test_each_ranks_shards_and_states_match_fsdp2_on_gloo() -> None:
    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    real = _gloo()
    for rank in (0, WORLD - 1):
        assert _traced(rank) == real[rank], f"rank {rank}"
    assert real[0][1] > real[WORLD - 1][1]  # the last rank's rows are fewer
