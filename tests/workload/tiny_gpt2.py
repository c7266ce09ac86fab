"""A GPT-2 small enough for the data-parallel tests, built from a config, and its batches."""

from __future__ import annotations

import torch
from torch import nn


def tiny_gpt2(n_layer: int = 2, n_embd: int = 128, n_positions: int = 256) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(
            n_layer=n_layer, n_embd=n_embd, n_head=4, vocab_size=1000, n_positions=n_positions
        )
    )


def token_batch(batch: int = 4, seq: int = 256) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 1000, (batch, seq))
    return {"input_ids": ids, "labels": ids}


def gloo_ranks(code: str, world: int, **env: str) -> dict[int, list[int]]:
    """Run ``code`` as ``world`` CPU processes of one gloo job (torchrun's environment); each
    prints ``RESULT [rank, ...]``. Returns what each rank printed after its rank."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    base = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE=str(world))
    base.update(OMP_NUM_THREADS="1", LOCAL_RANK="0", TESTS=os.path.dirname(__file__), **env)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env={**base, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(world)
    ]
    found: dict[int, list[int]] = {}
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        line = next(ln for ln in out.splitlines() if ln.startswith("RESULT "))
        rank, *values = json.loads(line[len("RESULT ") :])
        found[rank] = values
    return found
