"""The Lightning integration: the guard in a manual-optimization training_step, on a real
Trainer, gives the parameters of a plain loop; the callback logs it and runs the leak detector."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import memfit
from memfit.runtime import InjectOOM, LeakDetector

L = pytest.importorskip("lightning.pytorch")
integration = pytest.importorskip("memfit.integrations.lightning")

STEPS = 3


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    return [
        (torch.randn(12, 6, generator=g, dtype=torch.float64), torch.randint(3, (12,), generator=g))
        for _ in range(STEPS)
    ]


def make_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
    ).double()


def loss(module: Any, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(module.net(batch[0]), batch[1])


class Guarded(L.LightningModule):
    def __init__(self, leak: bool = False) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.net = make_net()
        self.guard: memfit.AutoMicrobatch | None = None
        self.kept: list[torch.Tensor] = []
        self.leak = leak

    def training_step(self, batch: Any, batch_idx: int) -> None:
        if self.guard is None:
            self.guard = integration.lightning_guard(self, loss, grow_after=None)
        self.guard.step(batch)
        if self.leak:
            self.kept.append(torch.zeros(4096))  # grows every step

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def trainer(callback: Any, steps: int = STEPS) -> Any:
    return L.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callback],
    )


def test_guarded_training_step_matches_a_plain_loop(tmp_path):
    module = Guarded()
    callback = integration.MemfitCallback(oom_dir=tmp_path, leak_detector=False)
    t = trainer(callback)
    with InjectOOM(module.net, max_samples=4, phase="backward") as oom:
        t.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches(), batch_size=None))
    assert oom.raised and t.global_step == STEPS
    assert module.guard is not None and module.guard.microbatch_size == 3  # 12 -> 6 -> 3
    assert float(t.callback_metrics["memfit/microbatch_size"]) == 3.0
    assert float(t.callback_metrics["memfit/oom_incidents"]) == 2.0
    ref = make_net()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for x, y in batches():
        opt.zero_grad()
        F.cross_entropy(ref(x), y).backward()
        opt.step()
    for p, q in zip(module.net.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)
    assert callback.services.oom is None  # closed at the end of fit


def test_the_callback_runs_the_leak_detector(tmp_path):
    module = Guarded(leak=True)
    callback = integration.MemfitCallback(
        oom_dir=None, leak_detector=LeakDetector(window=2, min_growth=1, device="cpu")
    )
    loader = torch.utils.data.DataLoader(batches() * 2, batch_size=None)
    trainer(callback, steps=2 * STEPS).fit(module, train_dataloaders=loader)
    assert callback.leak_reports, "six steps that each keep 16 KiB more should be reported"


def test_automatic_optimization_is_refused():
    module = Guarded()
    module.automatic_optimization = True
    with pytest.raises(memfit.InvalidInputError, match="needs manual optimization"):
        integration.lightning_guard(module, loss)
