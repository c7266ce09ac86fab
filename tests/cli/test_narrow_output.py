"""``memfit plan`` in a terminal 80 columns wide, in a process of its own as a user runs it:
no line longer than the terminal, and nothing logged by the model's library (transformers),
from the main process or the planner's forked workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

TINY_GPT2 = """\
import torch
import transformers


def make():
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=128, n_positions=64, bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def make_batch(n, seq_len):
    ids = torch.randint(0, 128, (n, seq_len))
    return {"input_ids": ids, "labels": ids}
"""


def test_a_plan_at_80_columns_fits_and_no_library_logs(tmp_path: Path) -> None:
    model = tmp_path / "tiny_gpt2.py"
    model.write_text(TINY_GPT2)
    env = {**os.environ, "COLUMNS": "80", "TRANSFORMERS_VERBOSITY": "info"}
    cmd = [sys.executable, "-c", "from memfit.cli import main; raise SystemExit(main())"]
    # two workers: the candidates are traced in forked processes, whose logging counts too
    args = ["plan", f"{model}:make", "-b", "8", "-s", "32", "--gpu", "1GiB", "--workers", "2"]
    done = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Chosen:" in done.stdout and "Left out at this width: tokens/s" in done.stdout
    for stream in (done.stdout, done.stderr):
        assert "[transformers]" not in stream and "loss_type" not in stream, stream
        assert max(len(line) for line in stream.splitlines()) <= 80, stream
