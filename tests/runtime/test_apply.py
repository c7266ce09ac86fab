"""memfit.apply / unapply / fit on real small models (CPU): the step equals the unsplit step,
and every change is taken back."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import pytest
import torch
from apply_models import gpt2
from torch import nn

import memfit
import memfit.technique.checkpointing
from memfit.planner import Candidate, Evaluated, Plan, model_key
from memfit.runtime import AutoMicrobatch, PlannedStep, apply, fit, unapply

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def resnet() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10)


def text_batch(n: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 128, (n, 16), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids}


def image_batch(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g)


def image_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def make_plan(model: nn.Module, **settings: Any) -> Plan:
    values = {
        "micro_batch": 2,
        "accumulation": 4,
        "precision": "fp32",
        "checkpointing": False,
        "optimizer": "sgd",
        "allocator_config": "",
        **settings,
    }
    c = Candidate(**values)
    e = Evaluated(c, 2**20, 2**21, 2**22, 0.1, 80.0, None, "gpu", True, ())
    total = c.micro_batch * c.accumulation
    return Plan("test", model_key(model), 2**30, 2**29, 0.05, total, 16, e, [e], e)


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def unsplit(model: nn.Module, batch: Any, loss_fn: Any) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss_fn(model, batch).backward()
    out = grads(model)
    model.zero_grad(set_to_none=True)
    return out


def hf_loss(model: nn.Module, batch: Any) -> torch.Tensor:
    return model(**batch).loss


def assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=1e-5, msg=name)


def state(model: nn.Module) -> dict[str, tuple[torch.dtype, torch.Tensor]]:
    return {k: (v.dtype, v.detach().clone()) for k, v in model.state_dict().items()}


def same_state(model: nn.Module, before: dict[str, tuple[torch.dtype, torch.Tensor]]) -> None:
    now = model.state_dict()
    assert list(now) == list(before)
    for k, (dtype, value) in before.items():
        assert now[k].dtype == dtype, k
        assert torch.equal(now[k], value), k


# -- model_key --------------------------------------------------------------------------------


def test_model_key_is_class_elements_tensors_on_any_device_and_when_checkpointed():
    model = gpt2()
    n = sum(p.numel() for p in model.parameters())
    key = model_key(model)
    assert key == f"GPT2LMHeadModel/{n}/{len(list(model.parameters()))}"
    with torch.device("meta"):
        assert model_key(gpt2()) == key
    assert model_key(copy.deepcopy(model).to(torch.bfloat16)) == key
    memfit.technique.checkpointing.checkpoint_blocks(model)
    assert model_key(model) == key
    assert model_key(torch.nn.DataParallel(nn.Linear(3, 2))) == "Linear/8/2"


# -- the step ---------------------------------------------------------------------------------


@pytest.mark.parametrize("checkpointing", [False, True, "selective", 0.5])
def test_gpt2_step_gradients_equal_the_unsplit_step(checkpointing: bool | str | float):
    model = gpt2()
    batch = text_batch(8)
    expected = unsplit(model, batch, hf_loss)
    expected_loss = float(hf_loss(model, batch).detach())
    seen: dict[str, torch.Tensor] = {}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plan = make_plan(model, checkpointing=checkpointing)
    step = apply(model, opt, plan, before_step=lambda: seen.update(grads(model)))
    assert isinstance(step, PlannedStep) and step.micro_batch == 2 and step.accumulation == 4
    loss = step(batch)
    assert_close(seen, expected)
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True)
    assert float(loss) == pytest.approx(expected_loss, abs=1e-5)
    unapply(model, opt)


def test_resnet_step_gradients_equal_the_unsplit_step_in_four_micro_batches():
    model = resnet().eval()  # batch-norm running statistics: the split changes nothing
    batch = image_batch(8)
    expected = unsplit(model, batch, image_loss)
    seen: dict[str, torch.Tensor] = {}
    calls: list[int] = []

    def loss_fn(m: nn.Module, b: Any) -> torch.Tensor:
        calls.append(b[0].shape[0])
        return image_loss(m, b)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = apply(
        model,
        opt,
        make_plan(model, checkpointing=True),
        loss_fn=loss_fn,
        before_step=lambda: seen.update(grads(model)),
    )
    assert step.changes == ("full activation checkpointing of 8 blocks (memfit's)",)
    step(batch)
    assert calls == [2, 2, 2, 2]
    assert_close(seen, expected)
    unapply(model, opt)


def test_a_batch_larger_than_planned_runs_as_more_micro_batches_of_the_planned_size():
    model = resnet().eval()
    batch = image_batch(12)
    expected = unsplit(model, batch, image_loss)
    seen: dict[str, torch.Tensor] = {}
    calls: list[int] = []

    def loss_fn(m: nn.Module, b: Any) -> torch.Tensor:
        calls.append(b[0].shape[0])
        return image_loss(m, b)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = apply(
        model, opt, make_plan(model), loss_fn=loss_fn, before_step=lambda: seen.update(grads(model))
    )
    step(batch)
    assert calls == [2] * 6
    assert_close(seen, expected)


def test_automicrobatch_starts_at_the_given_microbatch_size():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sizes: list[int] = []

    def loss_fn(m: nn.Module, b: torch.Tensor) -> torch.Tensor:
        sizes.append(b.shape[0])
        return m(b).pow(2).mean()

    guard = AutoMicrobatch(model, opt, loss_fn, microbatch_size=3)
    assert guard.microbatch_size == 3
    guard.step(torch.randn(8, 4))
    assert sizes == [3, 3, 2]


# -- checkpointing on and off -----------------------------------------------------------------


def _forward(model: nn.Module, batch: Any) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        out = model(**batch).logits if isinstance(batch, dict) else model(batch[0])
    model.train()
    return out


def test_gpt2_own_checkpointing_switched_on_and_off_leaves_forward_and_state_dict():
    model = gpt2()
    batch = text_batch(4)
    before, out = state(model), _forward(model, batch)
    attrs = [dict(m.__dict__) for m in model.modules()]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    step = apply(model, opt, make_plan(model, checkpointing=True))
    assert model.is_activation_checkpointing
    step(text_batch(8))
    unapply(model, opt)
    assert not model.is_activation_checkpointing
    assert not model.transformer.wte._forward_hooks  # the input hook switching on added
    for module, saved in zip(model.modules(), attrs, strict=True):
        assert set(module.__dict__) - {"training"} == set(saved) - {"training"}
    same_state(model, before)
    torch.testing.assert_close(_forward(model, batch), out, atol=0, rtol=0)


@pytest.mark.parametrize(
    ("build", "ckpt", "count"), [(gpt2, "selective", 2), (resnet, True, 8), (resnet, 0.25, 2)]
)
def test_memfit_block_checkpointing_wrapped_and_unwrapped(build: Any, ckpt: Any, count: int):
    model = build()
    batch = text_batch(4) if build is gpt2 else image_batch(4)
    before, out = state(model), _forward(model, batch)
    use_cache = getattr(getattr(model, "config", None), "use_cache", None)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    step = apply(model, opt, make_plan(model, checkpointing=ckpt))
    wrapped = [m for m in model.modules() if "forward" in m.__dict__]
    assert len(wrapped) == count
    if isinstance(ckpt, float):  # resnet18's 8 blocks: 2 of them, spread (layer1.1, layer3.1)
        assert any("2 of 8 blocks" in text for text in step.changes)
    unapply(model, opt)
    assert not [m for m in model.modules() if "forward" in m.__dict__]
    assert getattr(getattr(model, "config", None), "use_cache", None) == use_cache
    same_state(model, before)
    torch.testing.assert_close(_forward(model, batch), out, atol=0, rtol=0)


# -- precision --------------------------------------------------------------------------------


def test_pure_bf16_casts_parameters_and_buffers_and_unapply_casts_them_back():
    model = resnet()
    params = list(model.parameters())
    dtypes = {k: v.dtype for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = apply(
        model, opt, make_plan(model, precision="bf16", optimizer="adamw"), loss_fn=image_loss
    )
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.bn1.running_mean.dtype == torch.bfloat16
    assert model.bn1.num_batches_tracked.dtype == torch.int64
    assert torch.isfinite(step(image_batch(8)))  # the float inputs are cast too
    assert opt.state[params[0]]["exp_avg"].dtype == torch.bfloat16
    unapply(model, opt)
    assert {k: v.dtype for k, v in model.state_dict().items()} == dtypes
    assert all(a is b for a, b in zip(model.parameters(), params, strict=True))
    assert opt.state[params[0]]["exp_avg"].dtype == torch.float32


@pytest.mark.parametrize("precision", ["bf16-mixed", "fp16-mixed"])
def test_mixed_precision_changes_nothing_in_the_model_and_runs_under_autocast(precision: str):
    model = gpt2()
    dtypes = {p.dtype for p in model.parameters()}
    seen: list[torch.dtype] = []

    def loss_fn(m: nn.Module, b: Any) -> torch.Tensor:
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return hf_loss(m, b)

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = apply(model, opt, make_plan(model, precision=precision), loss_fn=loss_fn)
    assert step.changes == ()
    assert (step.scaler is not None) == (precision == "fp16-mixed")
    step(text_batch(8))
    half = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    assert seen == [half] * 4
    assert {p.dtype for p in model.parameters()} == dtypes


# -- the optimizer ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fused", "foreach"),
    [("adamw-fused", True, False), ("adamw-foreach", False, True), ("adamw-forloop", False, False)],
)
def test_optimizer_flags_set_and_restored(name: str, fused: bool, foreach: bool):
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = [dict(g, params=None) for g in opt.param_groups]
    step = apply(model, opt, make_plan(model, optimizer=name))
    assert all(g["fused"] is fused and g["foreach"] is foreach for g in opt.param_groups)
    assert opt._step_supports_amp_scaling is fused
    step(text_batch(8))
    unapply(model, opt)
    assert [dict(g, params=None) for g in opt.param_groups] == before
    assert "_step_supports_amp_scaling" not in opt.__dict__


def test_fused_on_an_optimizer_that_has_stepped_moves_its_step_counts_and_back():
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    step = apply(
        model, opt, make_plan(model, optimizer="adam-fused"), loss_fn=lambda m, b: m(b).sum()
    )
    step(torch.randn(8, 4))
    assert all(s["step"].dtype == torch.float32 for s in opt.state.values())
    unapply(model, opt)
    assert all(s["step"].device.type == "cpu" for s in opt.state.values())
    opt.step()  # the restored foreach/for-loop path takes the state


def test_plain_name_leaves_the_optimizers_own_flags():
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    step = apply(model, opt, make_plan(model, optimizer="adamw"))
    assert step.changes == ()
    assert opt.param_groups[0]["foreach"] is False


def test_an_optimizer_memfit_does_not_know_runs_as_it_is_with_a_warning():
    model = nn.Linear(4, 2)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    with pytest.warns(RuntimeWarning, match=r"adamw-fused.*RMSprop.*left as it is"):
        step = apply(
            model, opt, make_plan(model, optimizer="adamw-fused"), loss_fn=lambda m, b: m(b).sum()
        )
    assert step.changes == ()
    assert opt.param_groups[0]["foreach"] is None


# -- the allocator ----------------------------------------------------------------------------


def test_allocator_setting_warns_when_it_cannot_take_effect():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plan = make_plan(model, allocator_config="expandable_segments:True")
    with pytest.warns(
        RuntimeWarning,
        match=r"expandable_segments:True cannot take effect.*PYTORCH_CUDA_ALLOC_CONF",
    ):
        step = apply(model, opt, plan, loss_fn=lambda m, b: m(b).sum())
    assert step.changes == ()


def test_allocator_setting_set_and_restored(monkeypatch: pytest.MonkeyPatch):
    from memfit.runtime import _apply as module

    get = torch._C._accelerator_getAllocatorSettings
    monkeypatch.setattr(module, "_allocator_blocked", lambda model: None)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    torch._C._accelerator_setAllocatorSettings("expandable_segments:False")
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = apply(model, opt, make_plan(model, allocator_config="expandable_segments:True"))
    assert step.changes == ("allocator settings expandable_segments:True",)
    assert get() == "expandable_segments:True"
    unapply(model, opt)
    assert get() == "expandable_segments:False"


# -- fit ----------------------------------------------------------------------------------------


def test_fit_plans_with_batches_made_from_the_example_and_applies(monkeypatch: pytest.MonkeyPatch):
    model = gpt2()
    example = text_batch(4)
    kept = {k: v.clone() for k, v in example.items()}
    calls: list[dict[str, Any]] = []

    def fake_plan(m: nn.Module, batch: Any = None, **kwargs: Any) -> Plan:
        calls.append(kwargs)
        made = kwargs["batch_of"](6)
        assert made["input_ids"].shape == (6, 16)
        assert torch.equal(made["input_ids"][4:], example["input_ids"][:2])  # repeated rows
        made["input_ids"].add_(1)  # the planner's batches are its own
        return make_plan(m, micro_batch=2, accumulation=2, optimizer="adamw-forloop")

    monkeypatch.setattr(memfit.planner, "plan", fake_plan)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = fit(model, opt, budget="24GiB", batch=example, gpu="h100", precisions=["fp32"])
    (kwargs,) = calls
    assert kwargs["global_batch"] == 4 and kwargs["optimizer"] == "adamw"
    assert kwargs["precisions"] == ["fp32"] and kwargs["loss_fn"] is None
    assert kwargs["budget"].total == 24 * 2**30 and kwargs["budget"].name.startswith("H100")
    assert all(torch.equal(example[k], kept[k]) for k in kept)
    assert opt.param_groups[0]["foreach"] is False
    step(example)
    unapply(model, opt)
    assert opt.param_groups[0]["foreach"] is None


def test_public_names():
    for name in ("apply", "unapply", "fit", "PlannedStep"):
        assert name in memfit.__all__ and getattr(memfit, name) is getattr(memfit.runtime, name)


def test_no_warning_from_a_plain_apply():
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        apply(model, opt, make_plan(model, optimizer="adamw-fused", checkpointing=True))
    unapply(model, opt)


@pytest.mark.parametrize(
    ("checkpointing", "offload", "checkpoints"),
    [
        (False, 1.0, False),
        (0.5, 1.0, False),
        (False, 0.5, False),
        (True, 0.0, True),
        (0.5, 1.0, True),
    ],
)
def test_an_offloading_plan_steps_as_the_unsplit_step_and_unapply_takes_it_off(
    checkpointing: bool | float, offload: float, checkpoints: bool
):
    from memfit.technique.checkpointing import checkpointed_blocks
    from memfit.technique.offload import offloader_of

    model = gpt2()
    batch = text_batch(8)
    expected = unsplit(model, batch, hf_loss)
    seen: dict[str, torch.Tensor] = {}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plan = make_plan(
        model, checkpointing=checkpointing, offload=offload, offload_checkpoints=checkpoints
    )
    step = apply(model, opt, plan, before_step=lambda: seen.update(grads(model)))
    offloading = offloader_of(model)
    assert offloading is not None and offloading.offloaded
    # the checkpointed blocks' inputs are offloaded where the plan says (memfit's wrapping
    # in place of GPT-2's own switch, which the offload could not wrap)
    assert bool(offloading.checkpointed) == checkpoints
    assert bool(checkpointed_blocks(model)) == bool(checkpointing)
    assert not model.is_gradient_checkpointing
    assert any("activation offload" in text for text in step.changes)
    step(batch)
    assert_close(seen, expected)
    unapply(model, opt)
    assert offloader_of(model) is None
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_a_plan_offloading_a_model_already_offloaded_is_refused_before_any_change():
    model = gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handle = memfit.offload_activations(model)
    with pytest.raises(memfit.InvalidInputError, match="already has memfit's activation offload"):
        apply(model, opt, make_plan(model, checkpointing=0.5, offload=1.0))
    assert not any("_memfit_checkpointed" in m.__dict__ for m in model.modules())
    handle.remove()


def test_a_plan_offloading_a_model_with_its_own_checkpointing_is_refused_before_any_change():
    # its checkpoint runs outside the forward the offload wraps: the offload would copy the
    # recompute's tensors, not the blocks' inputs
    model = gpt2()
    model.gradient_checkpointing_enable()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(memfit.InvalidInputError, match="own gradient checkpointing switched on"):
        apply(model, opt, make_plan(model, offload=1.0, optimizer="sgd-fused"))
    assert not any(g.get("fused") for g in opt.param_groups)  # nothing was changed
    from memfit.technique.offload import offloader_of

    assert offloader_of(model) is None and model.is_gradient_checkpointing


def test_apply_warns_when_the_cache_keeps_what_empty_cache_cannot_release(
    monkeypatch: pytest.MonkeyPatch,
):
    model = nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plan = make_plan(model)  # a 1 GiB budget
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: 2**28)
    reserved = {"now": 2**28 + 2**27}  # 128 MiB cached: over a tenth of the budget
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: reserved["now"])
    with pytest.warns(UserWarning, match=r"keeps 128\.00 MiB of cached CUDA memory"):
        apply(model, optimizer, plan, loss_fn=lambda m, b: m(b).sum())
    unapply(model, optimizer)
    reserved["now"] = 2**28 + 2**20  # 1 MiB: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        apply(model, optimizer, plan, loss_fn=lambda m, b: m(b).sum())
    unapply(model, optimizer)
