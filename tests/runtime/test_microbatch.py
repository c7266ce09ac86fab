"""AutoMicrobatch on the CPU: after steps that ran out of memory and were split, the parameters
equal those of the same steps run whole (float64, so the check is strict: only the summation
order differs), for MLPs and for real models built from configs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import memfit
from memfit.runtime import InjectOOM

TIGHT = {"rtol": 1e-10, "atol": 1e-12}


def mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)
    ).double()


def mlp_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(model(batch["x"]), batch["y"])


def mlp_batches(sizes: list[int], seed: int = 1) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        {
            "x": torch.randn(n, 6, generator=g, dtype=torch.float64),
            "y": torch.randint(3, (n,), generator=g),
        }
        for n in sizes
    ]


def reference(
    make: Callable[[], torch.nn.Module],
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    batches: list[Any],
    make_opt: Callable[[torch.nn.Module], torch.optim.Optimizer],
) -> torch.nn.Module:
    """The plain loop: whole batches, no guard."""
    model = make()
    opt = make_opt(model)
    for batch in batches:
        opt.zero_grad(set_to_none=True)
        loss_fn(model, batch).backward()
        opt.step()
    return model


def adamw(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=1e-2)


def assert_same_params(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        torch.testing.assert_close(pa, pb, **TIGHT, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_split_steps_equal_whole_steps(phase):
    batches = mlp_batches([16, 16, 10, 16])
    model = mlp()
    opt = adamw(model)
    guard = memfit.AutoMicrobatch(model, opt, mlp_loss, grow_after=None)
    with InjectOOM(model, max_samples=5, phase=phase) as oom:
        losses = [guard.step(b) for b in batches]
    assert oom.raised and oom.raised[0].startswith(phase)
    assert guard.microbatch_size == 4  # 16 -> 8 -> 4 (10 then runs as 4, 3, 3)
    assert [(i.action, i.microbatch_before, i.microbatch_after) for i in guard.incidents] == [
        ("split", 16, 8),
        ("split", 8, 4),
    ]
    assert all(i.phase == phase and i.here and i.memory is None for i in guard.incidents)
    ref = reference(mlp, mlp_loss, batches, adamw)
    assert_same_params(model, ref)
    torch.testing.assert_close(losses[0], mlp_loss(mlp(), batches[0]), **TIGHT)


def test_uneven_split_is_exact_and_loss_is_the_whole_batch_mean():
    batches = mlp_batches([10, 7])
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    guard = memfit.AutoMicrobatch(model, opt, mlp_loss)
    first_loss = mlp_loss(mlp(), batches[0]).detach()
    with InjectOOM(model, max_samples=3):
        loss = guard.step(batches[0])
        guard.step(batches[1])
    assert guard.microbatch_size == 3  # 10 -> 5 -> 3: micro-batches of 3, 3, 2, 2
    torch.testing.assert_close(loss, first_loss, **TIGHT)
    ref = reference(
        mlp, mlp_loss, batches, lambda m: torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)
    )
    assert_same_params(model, ref)


def test_bert_with_a_batch_encoding_and_the_default_loss():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return transformers.BertForSequenceClassification(config).double()

    g = torch.Generator().manual_seed(3)
    batches = [
        transformers.BatchEncoding(
            {
                "input_ids": torch.randint(50, (8, 12), generator=g),
                "attention_mask": torch.ones(8, 12, dtype=torch.long),
                "labels": torch.randint(2, (8,), generator=g),
            }
        )
        for _ in range(2)
    ]
    model = make()
    guard = memfit.AutoMicrobatch(model, adamw(model))  # loss: model(**batch).loss
    with InjectOOM(model, max_samples=3, phase="backward") as oom:
        for b in batches:
            guard.step(b)
    assert oom.raised and guard.microbatch_size == 2
    ref = reference(make, lambda m, b: m(**b).loss, batches, adamw)
    assert_same_params(model, ref)


def test_gpt2_causal_lm_from_config():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        vocab_size=64,
        n_positions=32,
        n_embd=16,
        n_layer=2,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(config).double()

    def loss_fn(m: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        return m(input_ids=ids, labels=ids).loss

    g = torch.Generator().manual_seed(4)
    batches = [torch.randint(64, (6, 16), generator=g) for _ in range(3)]
    model = make()
    guard = memfit.AutoMicrobatch(model, adamw(model), loss_fn)
    with InjectOOM(model, max_samples=2):
        for b in batches:
            guard.step(b)
    assert guard.microbatch_size == 2
    assert_same_params(model, reference(make, loss_fn, batches, adamw))


def test_resnet18_with_group_norm_and_a_tuple_batch():
    torchvision = pytest.importorskip("torchvision")

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        norm = lambda c: torch.nn.GroupNorm(4, c)  # noqa: E731 - per-sample norm: splits exactly
        return torchvision.models.resnet18(num_classes=5, norm_layer=norm).double()

    def loss_fn(m: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(m(batch[0]), batch[1])

    g = torch.Generator().manual_seed(5)
    batches = [
        (
            torch.randn(4, 3, 32, 32, generator=g, dtype=torch.float64),
            torch.randint(5, (4,), generator=g),
        )
    ]
    model = make()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    guard = memfit.AutoMicrobatch(model, opt, loss_fn)
    with InjectOOM(model, max_samples=1):
        guard.step(batches[0])
    assert guard.microbatch_size == 1
    assert_same_params(
        model, reference(make, loss_fn, batches, lambda m: torch.optim.SGD(m.parameters(), lr=0.1))
    )


def test_grad_scaler_state_matches_the_unsplit_run():
    batches = mlp_batches([12, 12, 12])

    def run(max_samples: int | None) -> tuple[torch.nn.Module, float, int]:
        model = mlp()
        opt = adamw(model)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
        guard = memfit.AutoMicrobatch(model, opt, mlp_loss, scaler=scaler)
        with InjectOOM(model, max_samples=max_samples, phase="backward"):
            for b in batches:
                guard.step(b)
        return model, scaler.get_scale(), len(guard.incidents)

    split, split_scale, incidents = run(5)
    whole, whole_scale, none = run(None)
    assert incidents == 2 and none == 0
    assert split_scale == whole_scale == 2.0**11  # grew once after two finite steps, both runs
    assert_same_params(split, whole)


def test_before_step_sees_complete_gradients():
    batches = mlp_batches([12, 12])
    norms: list[float] = []

    def clip(model: torch.nn.Module) -> Callable[[], None]:
        return lambda: norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)))

    model = mlp()
    guard = memfit.AutoMicrobatch(model, adamw(model), mlp_loss, before_step=clip(model))
    with InjectOOM(model, max_samples=4):
        for b in batches:
            guard.step(b)
    ref = mlp()
    ref_opt = adamw(ref)
    ref_norms = []
    for b in batches:
        ref_opt.zero_grad()
        mlp_loss(ref, b).backward()
        ref_norms.append(float(torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.1)))
        ref_opt.step()
    assert norms == pytest.approx(ref_norms, rel=1e-12)
    assert_same_params(model, ref)


def test_grows_back_after_clean_steps_and_backs_off_when_growth_fails(caplog):
    model = mlp()
    guard = memfit.AutoMicrobatch(model, adamw(model), mlp_loss, grow_after=2)
    batches = mlp_batches([8] * 9)
    caplog.set_level(logging.INFO, logger="memfit.guard")
    with InjectOOM(model, max_samples=4) as oom:
        guard.step(batches[0])  # 8 fails -> 4
        assert guard.microbatch_size == 4
        guard.step(batches[1])
        guard.step(batches[2])  # two clean steps
        guard.step(batches[3])  # tries 8: fails, back to 4, now waits 4 steps
        assert [i.action for i in guard.incidents] == ["split", "restore"]
        assert guard.microbatch_size == 4
        for b in batches[4:8]:
            guard.step(b)
        assert len(guard.incidents) == 2  # no growth attempt within the doubled wait
        oom.max_samples = None  # memory is available again
        guard.step(batches[8])  # tries 8 and succeeds: whole batches again
    assert guard.microbatch_size is None
    assert "fit again" in caplog.text and "out of memory in the forward" in caplog.text
    assert_same_params(model, reference(mlp, mlp_loss, batches, adamw))


def test_a_single_sample_that_does_not_fit_raises_with_a_report():
    model = mlp()
    before = [p.detach().clone() for p in model.parameters()]
    seen: list[memfit.MicrobatchIncident] = []
    guard = memfit.AutoMicrobatch(model, adamw(model), mlp_loss, on_incident=seen.append)
    with InjectOOM(model, max_samples=0), pytest.raises(memfit.UnrecoverableOOMError) as info:
        guard.step(mlp_batches([4])[0])
    message = str(info.value)
    assert "batch of 4 samples does not fit even as micro-batches of 1 (a single sample)" in message
    assert "activation checkpointing" in message and "not on a CUDA device" in message
    assert info.value.incident is seen[-1] and seen[-1].action == "fatal"
    assert [i.microbatch_after for i in seen] == [2, 1, None]
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_min_microbatch_is_the_floor():
    model = mlp()
    guard = memfit.AutoMicrobatch(model, adamw(model), mlp_loss, min_microbatch=3)
    with (
        InjectOOM(model, max_samples=2),
        pytest.raises(memfit.UnrecoverableOOMError, match="min_microbatch=3 can be lowered"),
    ):
        guard.step(mlp_batches([12])[0])
    assert [i.microbatch_after for i in guard.incidents] == [6, 3, None]


def test_oom_in_the_optimizer_step_is_reported_and_leaves_the_guard_usable():
    batches = mlp_batches([8, 8, 8])
    model = mlp()
    opt = adamw(model)
    guard = memfit.AutoMicrobatch(model, opt, mlp_loss)
    with InjectOOM(model, optimizer=opt, optimizer_steps={2}):
        guard.step(batches[0])
        with pytest.raises(
            memfit.UnrecoverableOOMError, match=r"optimizer step at step 1 \(AdamW\).*fused=True"
        ):
            guard.step(batches[1])
        assert all(p.grad is None for p in model.parameters())
        assert guard.steps == 1 and guard.incidents[-1].phase == "optimizer"
        guard.step(batches[2])  # the hook raised before AdamW touched anything: same as skipping
    assert_same_params(model, reference(mlp, mlp_loss, [batches[0], batches[2]], adamw))


def test_backward_only_keeps_earlier_gradients_when_an_attempt_fails():
    batches = mlp_batches([8, 8])
    model = mlp()
    guard = memfit.AutoMicrobatch(model, None, mlp_loss)
    guard.backward_only(batches[0])
    with InjectOOM(model, max_samples=3, phase="backward"):
        guard.backward_only(batches[1])  # fails twice, then runs as 3, 3, 2
    ref = mlp()
    mlp_loss(ref, batches[0]).backward()
    mlp_loss(ref, batches[1]).backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **TIGHT)
    with pytest.raises(memfit.InvalidInputError, match="step needs the optimizer"):
        guard.step(batches[0])


def test_decorator_form_with_a_summed_loss():
    batches = mlp_batches([9, 9])

    def summed(m: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.cross_entropy(m(b["x"]), b["y"], reduction="sum")

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    @memfit.auto_microbatch(model, opt, reduction="sum")
    def train_step(m: torch.nn.Module, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return summed(m, b)

    with InjectOOM(model, max_samples=4):
        loss = train_step(batches[0])
        train_step(batches[1])
    torch.testing.assert_close(loss, summed(mlp(), batches[0]).detach(), **TIGHT)
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.01)  # noqa: E731
    assert_same_params(model, reference(mlp, summed, batches, sgd))


def test_custom_split_and_size_functions():
    class Batch:
        def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
            self.x, self.y = x, y

    def split(b: Batch, n: int) -> list[Batch]:
        return [Batch(x, y) for x, y in zip(b.x.tensor_split(n), b.y.tensor_split(n), strict=True)]

    raw = mlp_batches([8, 8])
    batches = [Batch(b["x"], b["y"]) for b in raw]
    model = mlp()
    guard = memfit.AutoMicrobatch(
        model,
        adamw(model),
        lambda m, b: mlp_loss(m, {"x": b.x, "y": b.y}),
        split_fn=split,
        size_fn=lambda b: len(b.y),
        example_batch=batches[0],
    )
    with InjectOOM(model, max_samples=4):
        for b in batches:
            guard.step(b)
    assert guard.microbatch_size == 4
    assert_same_params(model, reference(mlp, mlp_loss, raw, adamw))


def test_a_split_fn_that_loses_samples_is_caught():
    model = mlp()
    guard = memfit.AutoMicrobatch(
        model, adamw(model), mlp_loss, split_fn=lambda b, n: [{k: v[:2] for k, v in b.items()}] * n
    )
    with (
        InjectOOM(model, max_samples=4),
        pytest.raises(memfit.InvalidInputError, match=r"\[2, 2\] samples for a batch of 8"),
    ):
        guard.step(mlp_batches([8])[0])


def test_unsplittable_batches_are_refused_before_anything_runs():
    model = mlp()
    with pytest.raises(memfit.InvalidInputError, match=r"str cannot be split.*split_fn"):
        memfit.AutoMicrobatch(model, adamw(model), mlp_loss, example_batch="some text")
    guard = memfit.AutoMicrobatch(model, adamw(model), mlp_loss)
    with InjectOOM(model) as oom, pytest.raises(memfit.InvalidInputError, match="disagree"):
        guard.step(
            {"x": torch.zeros(4, 6, dtype=torch.float64), "y": torch.zeros(3, dtype=torch.long)}
        )
    assert oom.forward_calls == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_microbatch": 0}, "min_microbatch=0"),
        ({"grow_after": 0}, "grow_after=0"),
        ({"reduction": "none"}, "reduction='none'"),
    ],
)
def test_bad_options_are_refused(kwargs, match):
    with pytest.raises(memfit.InvalidInputError, match=match):
        memfit.AutoMicrobatch(mlp(), None, mlp_loss, **kwargs)


def test_a_loss_that_is_not_a_scalar_is_refused():
    model = mlp()
    guard = memfit.AutoMicrobatch(model, adamw(model), lambda m, b: m(b["x"]))
    with pytest.raises(memfit.InvalidInputError, match="scalar tensor"):
        guard.step(mlp_batches([2])[0])


def test_context_manager_and_incident_text(caplog):
    model = mlp()
    caplog.set_level(logging.INFO, logger="memfit.guard")
    with (
        memfit.AutoMicrobatch(model, adamw(model), mlp_loss) as guard,
        InjectOOM(model, max_samples=2),
    ):
        guard.step(mlp_batches([4])[0])
    text = guard.incidents[0].text()
    assert text.startswith(
        "CUDA out of memory in the forward at step 0 (batch 4, micro-batches of 4)"
    )
    assert guard.incidents[0].to_dict()["microbatch_after"] == 2
    assert "1 out-of-memory incidents in 1 steps" in caplog.text
