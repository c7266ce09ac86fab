"""LeakDetector on CUDA: a monitoring loss kept with its graph is named, with shapes; a loop
without a leak is not reported; the dispatch mode is only on while growth is suspected."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode
from transformers import GPT2Config, GPT2LMHeadModel

import memfit

pytestmark = pytest.mark.gpu
HERE = "test_leak_gpu.py"


def loop(detector, steps, leak):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=2, n_positions=256)
    ).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    history = []
    for i in range(steps):
        # the batch size varies without a trend (1, 6, 3, 8, 5, 2, 7, 4, ...): not a leak
        ids = torch.randint(0, 1000, (8 if leak else 1 + (5 * i) % 8, 128), device="cuda")
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if leak:
            history.append(model(input_ids=ids[:4], labels=ids[:4]).loss)
        report = detector.step()
        if report is not None:
            return report
    return None


def test_the_leak_is_named_on_cuda():
    with memfit.LeakDetector(window=4, device="cuda") as det:
        report = loop(det, 20, leak=True)
        assert report is not None and report.device.startswith("cuda")
        assert min(report.growth) >= 2**20
        line, count, _nbytes = report.callers[0]
        assert HERE in line and count > 10
        assert report.holders[0].name == "history" and report.holders[0].grad_fn
        shapes = {shape for s in report.sites for shape, _, _ in s.shapes}
        assert "4x128x512" in shapes  # the MLP activations of the eval batch
    assert _get_current_dispatch_mode() is None


def test_no_leak_no_report_and_no_mode_left_on():
    with memfit.LeakDetector(window=5, min_growth=1, device="cuda") as det:
        assert loop(det, 30, leak=False) is None
        assert _get_current_dispatch_mode() is None
