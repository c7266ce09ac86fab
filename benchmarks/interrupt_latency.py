"""How long ``memfit plan`` takes to stop after Ctrl-C, sent at random points of a plan.

    PYTHONPATH=src python benchmarks/interrupt_latency.py [--runs 5] [--seed 0] [--out FILE.json]

Each run starts ``memfit plan`` on a small GPT-2 (12 blocks, the plan takes several seconds on
2 cores) in a process group of its own, as a shell starts a command, and sends SIGINT to the
group after a random delay within the plan; recorded: the delay, the seconds from the signal
to the exit, the exit code, whether a traceback was printed and whether any process of the run
outlived it. The target: every run ends within 1 s with exit code 130 and no traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

MODEL = """\
import torch
import transformers


def make():
    config = transformers.GPT2Config(
        n_layer=12, n_embd=64, n_head=2, vocab_size=256, n_positions=128, bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def make_batch(n, seq_len):
    ids = torch.randint(0, 256, (n, seq_len))
    return {"input_ids": ids, "labels": ids}
"""
PLAN = ["-b", "256", "-s", "128", "--gpu", "2GiB", "--workers", "2"]


def processes_tagged(tag: str) -> list[int]:
    """The processes whose environment holds ``tag`` (a command and anything it forked)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if tag.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def one_run(model: Path, delay: float) -> dict[str, Any]:
    """Interrupt one plan ``delay`` seconds after its start."""
    tag = uuid.uuid4().hex
    env = {**os.environ, "MEMFIT_INTERRUPT_RUN": tag}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memfit", "plan", f"{model}:make", *PLAN],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    time.sleep(delay)
    if proc.poll() is not None:
        return {"delay": delay, "finished_before": True}
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    time.sleep(0.5)
    return {
        "delay": round(delay, 2),
        "seconds_to_exit": round(took, 3),
        "exit_code": proc.returncode,
        "traceback": "Traceback" in out + err,
        "left_behind": len(processes_tagged(tag)),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "small_gpt2.py"
        model.write_text(MODEL)
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "memfit", "plan", f"{model}:make", *PLAN],
                       capture_output=True, check=False)  # fmt: skip
        whole = time.monotonic() - started
        runs = []
        for _ in range(args.runs):
            runs.append(one_run(model, rng.uniform(0.3, max(0.5, whole - 0.5))))
            print(json.dumps(runs[-1]), flush=True)
    result = {
        "date": dt.date.today().isoformat(),
        "command": " ".join(["python", *sys.argv]),
        "cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "plan_seconds_uninterrupted": round(whole, 2),
        "runs": runs,
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
