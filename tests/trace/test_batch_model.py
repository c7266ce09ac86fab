"""The batch model: a configuration traced at two batch sizes, its trace at others derived, and
the derivation equal to a direct trace (every event, what each allocation is, phases, notes,
costs; the estimate's peaks byte for byte). Small real models from configs: GPT-2, BERT, a
Llama-style model in bf16-mixed, torchvision's ResNet-18; a step that branches on the batch size
and mixture-of-experts routing are refused, and say why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.estimator import estimate_workload
from memfit.trace import (
    BatchModel,
    BatchRefusal,
    BatchTraces,
    Trace,
    _batch_traces,
    fit_batch_model,
    same_trace,
    trace_workload,
)
from memfit.workload import Workload, make_workload

transformers = pytest.importorskip("transformers")

H100 = resolve_gpu("h100")
SEQ = 64
VOCAB = 128


def tokens(n: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (n, SEQ))
    return {"input_ids": ids, "labels": ids}


def gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def bert() -> nn.Module:
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        vocab_size=VOCAB,
        max_position_embeddings=SEQ,
    )
    return transformers.BertForMaskedLM(config)


def llama() -> nn.Module:
    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=VOCAB,
    )
    return transformers.LlamaForCausalLM(config)


def resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.resnet18(num_classes=10)  # type: ignore[no-any-return]


def images(n: int) -> torch.Tensor:
    return torch.randn(n, 3, 64, 64)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], Any], str]] = {
    "gpt2": (gpt2, tokens, "fp32"),
    "bert": (bert, tokens, "fp32"),
    "llama-bf16-mixed": (llama, tokens, "bf16-mixed"),
    "resnet18": (resnet18, images, "fp32"),
}
SAMPLES = (2, 16)
TARGETS = (3, 5, 8, 32)


def workload_of(name: str) -> Workload:
    factory, batch_of, precision = MODELS[name]
    factory()  # skips here where its library is missing
    return make_workload(factory, batch_of=batch_of, batch_size=2, precision=precision)


def traced(workload: Workload, batch: int, *, calls: bool = True) -> Trace:
    return trace_workload(workload.with_batch_size(batch), H100, costs=True, kernel_calls=calls)


@pytest.fixture(scope="module", params=list(MODELS))
def fitted(request: pytest.FixtureRequest) -> tuple[Workload, BatchModel, dict[int, Trace]]:
    workload = workload_of(request.param)
    samples = {b: traced(workload, b) for b in SAMPLES}
    model = fit_batch_model(samples)
    assert isinstance(model, BatchModel), model
    return workload, model, samples


def test_derived_traces_are_the_direct_traces(
    fitted: tuple[Workload, BatchModel, dict[int, Trace]],
) -> None:
    workload, model, _ = fitted
    assert model.batches == SAMPLES
    for batch in TARGETS:
        derived = model.trace_at(batch)
        assert isinstance(derived, Trace), derived
        assert derived.derived_from == SAMPLES
        direct = traced(workload, batch, calls=False)
        assert same_trace(derived, direct) is None
        assert derived.costs == direct.costs  # each op's kind, FLOPs and bytes
        ours = estimate_workload(workload.with_batch_size(batch), trace=derived)
        theirs = estimate_workload(workload.with_batch_size(batch), trace=direct)
        assert (ours.peak_allocated, ours.peak_reserved) == (
            theirs.peak_allocated,
            theirs.peak_reserved,
        )
        assert ours.by_category == theirs.by_category
        assert ours.by_module == theirs.by_module
        assert ours.timeline.allocated == theirs.timeline.allocated
        assert ours.timeline.reserved == theirs.timeline.reserved
        assert ours.timeline.phases == theirs.timeline.phases
        assert ours.notes == theirs.notes
        assert ours.replayed_from == SAMPLES and theirs.replayed_from == ()


def test_kernels_that_allocate_otherwise_by_batch_are_derived_too() -> None:
    # a reduction's partial results appear only above some batch: the samples allocate
    # different numbers of buffers, and the derivation asks each kernel's rule at its batch
    workload = workload_of("gpt2")
    samples = {b: traced(workload, b) for b in SAMPLES}
    assert len({len(t.events) for t in samples.values()}) == 2
    model = fit_batch_model(samples)
    assert isinstance(model, BatchModel)
    lengths = set()
    for batch in (3, 8):
        derived = model.trace_at(batch)
        assert isinstance(derived, Trace)
        assert same_trace(derived, traced(workload, batch, calls=False)) is None
        lengths.add(len(derived.events))
    assert len(lengths | {len(t.events) for t in samples.values()}) > 1


def test_a_batch_of_one_is_traced_not_derived(
    fitted: tuple[Workload, BatchModel, dict[int, Trace]],
) -> None:
    _, model, _ = fitted
    refused = model.trace_at(1)
    assert isinstance(refused, BatchRefusal)
    assert "a batch of 1 is traced" in refused.reason
    assert isinstance(
        fit_batch_model({1: traced(workload_of("gpt2"), 1), 2: traced(workload_of("gpt2"), 2)}),
        BatchRefusal,
    )


class Branching(nn.Module):
    """A step whose forward runs another layer once the batch is larger than four."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(32, 32)
        self.large = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.first(x)
        if x.shape[0] > 4:
            y = self.large(y)
        return y


def branching() -> Workload:
    return make_workload(Branching, batch_of=lambda n: torch.randn(n, 32), batch_size=2)


def test_a_step_that_branches_on_the_batch_size_is_not_fitted() -> None:
    workload = branching()
    refused = fit_batch_model({b: traced(workload, b) for b in (2, 8)})
    assert isinstance(refused, BatchRefusal)
    assert "the traces at batch sizes 2 and 8 differ" in refused.reason
    # where they part: the first layer's output is kept for the second's backward at 8 only
    assert "first at addmm in first (step1.forward)" in refused.reason


def test_batch_traces_trace_where_no_model_fits_and_say_why() -> None:
    traces = BatchTraces(lambda b, calls: traced(branching(), b, calls=calls))
    for batch in (2, 8, 16):
        assert not traces.trace(batch).derived_from
    assert traces.traced == [2, 8, 16] and traces.derived == []
    # 2 and 8 did not match (tried when 16 was asked for), and no fit is tried before
    # another batch is asked for
    assert traces.model is None and traces.refusal is not None
    assert "batch sizes 2 and 8 differ" in traces.refusal
    # 8 and 16 both take the branch: a model fits them, and 12 is derived
    assert traces.trace(12).derived_from == (8, 16)
    assert traces.model is not None and traces.fitted == (8, 16)
    assert "batch size 12 replayed" in traces.summary()


def test_a_derivation_that_a_trace_contradicts_drops_the_model() -> None:
    # both samples below the branch: the model derives batch 8 without the large layer, the
    # trace at 8 runs it; verify finds the difference and every later batch is traced
    workload = branching()
    traces = BatchTraces(lambda b, calls: traced(workload, b, calls=calls))
    traces.trace(2)
    traces.trace(3)
    derived = traces.trace(8)
    assert derived.derived_from == (2, 3)
    checked = traces.verify(8, derived)
    assert not checked.derived_from
    assert traces.model is None and traces.checked == {8: False}
    assert traces.refusal is not None and "the trace at batch 8 differs" in traces.refusal
    assert not traces.trace(6).derived_from
    assert "not the same" in traces.summary()


def test_mixture_of_experts_routing_is_traced_at_every_batch() -> None:
    def mixtral() -> nn.Module:
        config = transformers.MixtralConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            num_local_experts=3,
            num_experts_per_tok=2,
        )
        config._experts_implementation = "eager"
        return transformers.MixtralForCausalLM(config)

    workload = make_workload(mixtral, batch_of=tokens, batch_size=2)
    refused = fit_batch_model({b: traced(workload, b) for b in (2, 5)})
    assert isinstance(refused, BatchRefusal)
    assert "not a linear function of the batch" in refused.reason


def test_the_switch_turns_the_model_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_batch_traces, "BATCH_MODEL", False)
    workload = workload_of("gpt2")
    traces = BatchTraces(lambda b, calls: traced(workload, b, calls=calls))
    for batch in (2, 4, 8):
        assert not traces.trace(batch).derived_from
    assert traces.model is None and traces.summary() == ""
