"""Models whose construction computes with tensors still estimate.

RegNet's widths come from ``torch.arange(...).tolist()`` and ``torch.tensor([...])``, timm's
drop-path rates from ``torch.linspace(...).tolist()``, and buffers are often
``torch.tensor(...)``. Built on the meta device, such code must read the real values (the shadow
values of ``trace/_shadow.py``) and allocate what a GPU build allocates, in the same order; a value
that is not known is answered with zeros and said in the notes; a copy too large to guess is
refused, naming the op, the module and the phase. Every model here is a few small layers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from memfit import Category, TraceError, estimate
from memfit._gpus import resolve_gpu
from memfit.trace import trace_workload
from memfit.workload import make_workload

H200 = resolve_gpu("h200")


class DataInInit(nn.Module):
    """Layer sizes, a buffer and a drop rate computed with tensors, as RegNet and timm do."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
        widths = (torch.arange(3) * 16 + 16).int().tolist()  # [16, 32, 48]
        depths = torch.diff(torch.tensor([0, 1, 3])).tolist()  # [1, 2]
        self.rates = [x.item() for x in torch.linspace(0, 0.2, 3)]
        extra = int(torch.arange(5).numpy().sum())  # 10
        self.stem = nn.Linear(8, widths[0])
        self.blocks = nn.Sequential(
            *[nn.Linear(widths[0], widths[0]) for _ in range(depths[0])],
            nn.Linear(widths[0], widths[1] + extra),
            *[nn.Linear(widths[1] + extra, widths[1] + extra) for _ in range(depths[1])],
        )
        self.head = nn.Linear(widths[1] + extra, widths[2])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x))) * self.scale.sum()


def _batch() -> torch.Tensor:
    return torch.randn(2, 8)


def _setup_tensors(model: Any) -> list[tuple[Category, tuple[int, ...]]]:
    """(category, shape) of each parameter and buffer the trace allocated, in its order."""
    work = make_workload(model, _batch, mode="infer")
    trace = trace_workload(work, H200)
    keep = (Category.PARAMETER, Category.BUFFER)
    return [
        (trace.infos[e.info].category, trace.infos[e.info].shape)
        for e in trace.events[: trace.steps_start]
        if e.kind == "alloc" and trace.infos[e.info].category in keep
    ]


def test_construction_reads_real_values_and_allocates_as_a_gpu_build():
    cpu = DataInInit()
    assert cpu.rates == pytest.approx([0.0, 0.1, 0.2])
    expected = [(Category.BUFFER, (5,))] + [
        (Category.PARAMETER, tuple(p.shape)) for p in cpu.parameters()
    ]
    # the buffer made by torch.tensor(...) is allocated first, as on the GPU, then the layers
    assert _setup_tensors(DataInInit) == expected
    est = estimate(DataInInit, _batch, mode="infer")
    assert est.workload.parameters == sum(p.numel() for p in cpu.parameters())
    assert est.by_category[Category.BUFFER] == 5 * 4
    assert not [n for n in est.notes if "no known value" in n]


def test_user_tensor_data_on_cuda_in_the_step_is_an_allocation():
    class FromData(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            weights = torch.tensor(np.ones((256, 8), dtype=np.float32), device="cuda")
            return self.proj(x) + weights[: x.shape[0]]

    est = estimate(FromData, _batch, mode="infer")
    assert est.peak_allocated >= 256 * 8 * 4


def test_regnet_builds_with_its_real_stage_widths():
    models = pytest.importorskip("torchvision.models")
    cpu_params = sum(p.numel() for p in models.regnet_y_400mf().parameters())
    est = estimate("tv:regnet_y_400mf", batch_size=1, mode="infer")
    assert est.workload.parameters == cpu_params
    assert not [n for n in est.notes if "no known value" in n]


class UnknownValues(nn.Module):
    """Reads back values of a tensor too large for memfit to keep real values of."""

    def __init__(self) -> None:
        super().__init__()
        big = torch.rand(2048, 1024) + 1  # random: no value memfit can know
        self.width = 8 + int(big[0].cpu()[0])  # 9 on a GPU; 8 from the guessed zeros
        self.proj = nn.Linear(8, self.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def test_an_unknown_value_is_answered_with_zeros_and_said():
    est = estimate(UnknownValues, _batch, mode="infer")
    said = [n for n in est.notes if "copied to the host" in n]
    assert said and "answered zeros" in said[0]


class TooLargeToGuess(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.table = torch.empty(5000, 5000).cpu()  # 25M values: not guessed


def test_a_host_copy_too_large_to_guess_names_op_module_and_phase():
    with pytest.raises(TraceError) as info:
        estimate(TooLargeToGuess, _batch, mode="infer")
    text = str(info.value)
    assert "op aten::_to_copy" in text and "during setup" in text
    assert "shape (5000, 5000) is copied to the host" in text
    assert "custom CUDA extension" not in text and "register_fake" not in text


def test_the_cli_refuses_it_in_one_paragraph(tmp_path: Path, capsys: Any):
    from memfit.cli import main

    path = tmp_path / "host_copy.py"
    path.write_text(
        "import torch\n\n\n"
        "def make():\n"
        "    model = torch.nn.Linear(8, 8)\n"
        "    model.table = torch.empty(5000, 5000).tolist()\n"
        "    return model\n\n\n"
        "def make_batch(n, seq_len):\n    return torch.randn(n, 8)\n"
    )
    assert main(["estimate", f"{path}:make", "-b", "2"]) == 1
    captured = capsys.readouterr()
    out = captured.err + captured.out
    assert "Traceback" not in out
    assert "op aten::_to_copy" in captured.err and "during setup" in captured.err
    assert "custom CUDA extension" not in out
