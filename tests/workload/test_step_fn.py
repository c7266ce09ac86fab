"""The user's own step (``step_fn``): traced as written, with their autocast, scaler, micro-
batches and optimizers acting as on a GPU, on a machine without one. Small GPT-2 configs: each
estimate takes a fraction of a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import transformers
from torch import autocast, nn  # autocast imported by name before any trace, as users do

import memfit
from memfit._events import Category
from memfit.cli import main

CONFIG = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=4000, n_positions=256)


def build() -> nn.Module:
    return transformers.GPT2LMHeadModel(CONFIG)


def batch_of(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 4000, (n, 128))
    return {"input_ids": ids, "labels": ids}


def bf16_step(model: nn.Module, batch: Any, optimizer: Any) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    del loss  # as memfit's own loop does
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def test_a_step_written_like_memfits_loop_estimates_the_same():
    own = memfit.estimate(build, batch_of(8), precision="bf16-mixed")
    user = memfit.estimate(build, batch_of(8), step_fn=bf16_step)
    # the one difference: memfit's loop drops its reference to the batch before backward, a
    # step function holds its argument to the end (ids and labels: 8 x 128 x 8 bytes each)
    assert 0 <= user.peak_allocated - own.peak_allocated <= 2 * 8 * 128 * 8
    assert user.peak_reserved == own.peak_reserved
    assert user.peak_phase == own.peak_phase == "step2.backward"
    assert user.by_category[Category.OPTIMIZER_STATE] == own.by_category[Category.OPTIMIZER_STATE]
    assert user.by_category[Category.ACTIVATION] == own.by_category[Category.ACTIVATION]


def test_autocast_imported_by_name_acts_as_on_the_gpu():
    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        with autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    fp32 = memfit.estimate(build, batch_of(8))
    mixed = memfit.estimate(build, batch_of(8), step_fn=step)
    same = memfit.estimate(build, batch_of(8), step_fn=bf16_step)
    assert mixed.peak_allocated == same.peak_allocated
    assert mixed.peak_allocated < fp32.peak_allocated
    assert (
        "your step function ran as written, under torch.autocast (bfloat16), on float32 "
        "parameters" in mixed.notes
    )


def accumulate(micro: int) -> Any:
    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        n = batch["input_ids"].shape[0]
        for i in range(0, n, micro):
            part = {k: v[i : i + micro] for k, v in batch.items()}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**part).loss * micro / n
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def test_gradient_accumulation_keeps_gradients_live_through_the_next_forward():
    whole = memfit.estimate(build, batch_of(8), step_fn=bf16_step)
    one_micro = memfit.estimate(build, batch_of(2), step_fn=bf16_step)
    accumulated = memfit.estimate(build, batch_of(8), step_fn=accumulate(2))
    # four micro-batches of 2 take less than one batch of 8, and more than one step on 2: the
    # gradients of the first micro-batches are live while the later ones run forward
    assert one_micro.peak_allocated < accumulated.peak_allocated < whole.peak_allocated
    phases = [name for name, _ in accumulated.timeline.phases]
    assert phases.count("step1.backward") == 4


class Gan(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.g = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 256))
        self.d = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 1))


def gan_step(model: nn.Module, batch: torch.Tensor, optimizers: dict[str, Any]) -> None:
    fake = model.g(torch.randn(batch.shape[0], 64, device=batch.device))
    d_loss = model.d(batch).mean() - model.d(fake.detach()).mean()
    d_loss.backward()
    optimizers["d"].step()
    optimizers["d"].zero_grad()
    g_loss = -model.d(fake).mean()
    g_loss.backward()
    optimizers["g"].step()
    optimizers["g"].zero_grad()


def test_two_optimizers_from_a_factory_of_the_model():
    def optimizers(model: Gan) -> dict[str, Any]:
        return {
            "g": torch.optim.Adam(model.g.parameters()),
            "d": torch.optim.SGD(model.d.parameters(), momentum=0.9),
        }

    est = memfit.estimate(Gan, lambda: torch.randn(32, 256), step_fn=gan_step, optimizer=optimizers)
    g = sum(p.numel() for p in Gan().g.parameters()) * 4
    d = sum(p.numel() for p in Gan().d.parameters()) * 4
    # Adam keeps two states for the generator, SGD with momentum one for the discriminator
    assert est.by_category[Category.OPTIMIZER_STATE] >= 2 * g + d


def test_grad_scaler_scales_and_unscales_as_on_the_gpu():
    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        scaler = scalers.setdefault("s", torch.amp.GradScaler("cuda"))
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

    scalers: dict[str, Any] = {}
    est = memfit.estimate(build, batch_of(4), step_fn=step)
    scaler = scalers["s"]
    assert scaler.is_enabled()  # not disabled for want of CUDA here
    assert not any("no known value" in note for note in est.notes)  # found_inf answered: finite
    # the scaler the user keeps is left as it was found: no meta scale of the trace's in it, so
    # that the same step runs for real afterwards (the GPU test estimates, then measures)
    assert scaler._scale is None and scaler._growth_tracker is None
    assert not scaler._per_optimizer_states


def test_a_scaler_with_a_scale_already_keeps_it(monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as patch:  # made enabled, as on a GPU machine
        patch.setattr(torch.cuda.amp.common, "amp_definitely_not_available", lambda: False)
        scaler = torch.amp.GradScaler("cuda")
    scale, tracker = torch.full((), 1024.0), torch.zeros((), dtype=torch.int32)
    scaler._scale, scaler._growth_tracker = scale, tracker

    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    memfit.estimate(build, batch_of(4), step_fn=step)
    assert scaler._scale is scale and scaler._growth_tracker is tracker
    assert scale.item() == 1024.0 and tracker.item() == 0


def test_inference_step_runs_as_written():
    ids = torch.randint(0, 4000, (4, 128))

    def infer(model: nn.Module, batch: Any) -> torch.Tensor:
        with torch.inference_mode():
            return model(input_ids=batch["input_ids"].to("cuda")).logits[:, -1]

    mine = memfit.estimate(build, {"input_ids": ids, "labels": ids}, mode="infer", step_fn=infer)
    plain = memfit.estimate(build, {"input_ids": ids}, mode="infer")
    with_labels = memfit.estimate(build, {"input_ids": ids, "labels": ids}, mode="infer")
    # labels in the batch are not given to the model by the step: no loss is computed (the
    # step holds the labels, 4 x 128 x 8 bytes, which the plain batch does not have)
    assert mine.peak_allocated - plain.peak_allocated <= 4 * 128 * 8
    assert mine.peak_allocated < with_labels.peak_allocated


def test_the_users_model_is_untouched():
    model = build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    memfit.estimate(model, batch_of(2), step_fn=bf16_step)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None and p.device.type == "cpu" for p in model.parameters())


STEP_FILE = """
import torch
import transformers

def make_model():
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=128, n_head=4, vocab_size=4000, n_positions=256))

def make_batch(batch_size, seq_len):
    ids = torch.randint(0, 4000, (batch_size, seq_len or 64))
    return {"input_ids": ids, "labels": ids}

def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)

def step(model, batch, optimizer):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_files_step_and_make_optimizer_are_used_by_the_cli(tmp_path: Path, capsys):
    path = tmp_path / "job.py"
    path.write_text(STEP_FILE)
    assert main(["estimate", f"{path}:make_model", "--batch-size", "4", "--json"]) == 0
    out = capsys.readouterr().out
    import json

    data = json.loads(out)
    # SGD without momentum keeps no state: the file's make_optimizer was used, not AdamW
    assert data["by_category"].get("optimizer_state", 0) == 0


@pytest.mark.parametrize("steps", [1, 3])
def test_steps_run_the_step_that_many_times(steps: int):
    calls: list[int] = []

    def step(model: nn.Module, batch: Any, optimizer: Any) -> None:
        calls.append(1)
        bf16_step(model, batch, optimizer)

    memfit.estimate(build, batch_of(2), step_fn=step, steps=steps)
    assert len(calls) == steps
