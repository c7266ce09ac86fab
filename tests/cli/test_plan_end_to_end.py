"""`memfit plan` end to end on a real model file (no stand-in planner): the answer, the JSON and
the plot come from a real search."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memfit.cli import main

BLOCKS = """\
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 64)
        self.b = torch.nn.Linear(64, 64)

    def forward(self, x):
        return x + self.b(torch.relu(self.a(x)))


def make():
    return torch.nn.Sequential(*[Block() for _ in range(3)], torch.nn.Linear(64, 4))


def make_batch(n, seq_len):
    return torch.randn(n, 64)
"""


@pytest.fixture
def blocks(tmp_path: Path) -> str:
    path = tmp_path / "blocks.py"
    path.write_text(BLOCKS)
    return f"{path}:make"


def test_a_real_plan_prints_the_choice_and_writes_json_and_a_plot(
    blocks: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "plan.png"
    code = main(
        [
            "plan",
            blocks,
            "-b",
            "8",
            "--gpu",
            "1GiB",
            "--precisions",
            "bf16-mixed",
            "--json",
            "--plot",
            str(plot),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert data["fits"]
    fitting = [c for c in data["candidates"] if c["fits"]]
    assert data["chosen"] == min(fitting, key=lambda c: c["step_seconds"])
    # the precisions searched, and the user's own configuration (fp32) as the baseline
    assert {c["precision"] for c in data["candidates"]} == {"bf16-mixed", "fp32"}
    assert {c["activation_checkpointing"] for c in data["candidates"]} == {False, True, "selective"}
    assert data["chosen"]["micro_batch"] * data["chosen"]["accumulation"] == 8
    assert plot.stat().st_size > 10_000
