"""LeakDetector on the CPU: real leaks in a small GPT-2 training loop are named, with their
sites and shapes; a loop that does not leak is not reported, whatever its batch sizes."""

from __future__ import annotations

import json
import logging
import random

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import memfit

HERE = "test_leak.py"


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=2, n_positions=128)
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train(setup, detector, sizes, *, keep_loss=False, keep_eval=False):
    """A training loop; returns the first report and the step it came at."""
    model, optimizer = setup
    losses, history = [], []
    for i, size in enumerate(sizes):
        ids = torch.randint(0, 1000, (size, 32))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if keep_loss:
            losses.append(loss)  # the leak: the loss keeps grad_fn
        if keep_eval:  # the leak: a monitoring loss outside no_grad keeps its activations
            history.append(model(input_ids=ids[:2], labels=ids[:2]).loss)
        report = detector.step()
        if report is not None:
            return report, i
    return None, len(sizes)


def test_losses_kept_with_their_graph_are_named(setup):
    seen = []
    with memfit.LeakDetector(window=5, min_growth=1, on_leak=seen.append) as det:
        report, step = train(setup, det, [4] * 12, keep_loss=True)
    assert report is not None and step < 8
    assert seen == [report] == det.reports
    assert report.window == 5 and all(g > 0 for g in report.growth)
    holder = report.holders[0]
    assert holder.name == "losses" and HERE in holder.where
    assert holder.grad_fn.endswith("Backward0")
    # the new scalar losses, created under the loss line of this file
    assert any(
        HERE in s.caller and ("scalar", "float32", s.count) in s.shapes for s in report.sites
    )
    assert "loss.item() or loss.detach()" in str(report)


def test_activations_kept_by_an_eval_loss_are_named_with_shapes(setup):
    with memfit.LeakDetector(window=4, min_growth="64KiB") as det:
        report, _ = train(setup, det, [4] * 12, keep_eval=True)
    assert report is not None
    assert min(report.growth) >= 64 * 1024
    # most of the growth was created under the monitoring line of this file
    line, count, _nbytes = report.callers[0]
    assert HERE in line and "in train" in line and count > 10
    shapes = {shape for s in report.sites for shape, _, _ in s.shapes}
    assert "2x32x256" in shapes  # the MLP activations of the 2-sample eval batch
    assert any("transformers" in s.site for s in report.sites)
    assert report.holders[0].name == "history"
    data = json.loads(report.to_json())
    assert data["total_growth"] == sum(report.growth) and data["units"] == "bytes"


def test_no_report_without_a_leak_even_with_fluctuating_batches(setup):
    rng = random.Random(0)
    sizes = [rng.randint(1, 8) for _ in range(30)]
    with memfit.LeakDetector(window=5, min_growth=1) as det:
        report, steps = train(setup, det, sizes)
    assert report is None and steps == 30
    assert len(det.readings) == 30 and max(det.readings) > min(det.readings)


def test_reports_are_logged(setup, caplog):
    with (
        caplog.at_level(logging.WARNING, logger="memfit.leak"),
        memfit.LeakDetector(window=3, min_growth=1) as det,
    ):
        report, _ = train(setup, det, [2] * 8, keep_loss=True)
    assert report is not None
    assert any("grew for 3 steps in a row" in r.getMessage() for r in caplog.records)


def test_growth_alone_without_sites(setup):
    with memfit.LeakDetector(window=3, min_growth=1, sites=False) as det:
        report, _ = train(setup, det, [2] * 8, keep_loss=True)
    assert report is not None and report.growth == [4, 4, 4]  # one float32 loss a step
    assert report.sites == report.callers == report.holders == []


def test_close_removes_the_dispatch_mode():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    det = memfit.LeakDetector(device="cpu")
    det.step()
    assert _get_current_dispatch_mode() is not None
    det.close()
    assert _get_current_dispatch_mode() is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window": 1}, "window=1"),
        ({"min_growth": "lots"}, "not understood"),
        ({"device": "mps"}, "give 'cuda' or 'cpu'"),
    ],
)
def test_bad_settings(kwargs, match):
    with pytest.raises(memfit.InvalidInputError, match=match):
        memfit.LeakDetector(**kwargs)
