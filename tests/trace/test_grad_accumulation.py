"""Where two gradients of one tensor meet (residual connections, shared inputs), the autograd
engine adds them in place when it can. A trace under a Python dispatch mode would always add
out of place; the recorder restores what a plain run does. The reference is a plain run of the
same model on the CPU, counted with the profiler: no hard-coded expectation."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(h) + h


def _plain_out_of_place_adds(build: Callable[[], nn.Module], x: torch.Tensor) -> int:
    model = build()
    loss = model(x).float().sum()
    with torch.profiler.profile() as prof:
        loss.backward()
    return sum(e.name == "aten::add" for e in prof.events())


def _traced_out_of_place_adds(build: Callable[[], nn.Module], x: torch.Tensor) -> int:
    work = Workload(
        build_model=build,
        make_batch=lambda: x,
        loss_fn=lambda m, b: m(b).float().sum(),
        optimizer="sgd",
        steps=1,
    )
    trace = trace_workload(work, resolve_gpu("h200"))
    return sum(
        e.kind == "alloc"
        and trace.infos[e.info].op == "add"
        and trace.infos[e.info].phase.endswith("backward")
        for e in trace.events
    )


def _resnet18() -> nn.Module:
    torchvision = pytest.importorskip("torchvision")
    return torchvision.models.resnet18()


def _bert() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    )
    bert = transformers.BertModel(config)
    return _Pooled(bert)


def _llama() -> nn.Module:
    # bias-free projections: their input gradients arrive as views, which the engine does
    # not add into (two per layer are summed out of place; H200 traces of TinyLlama)
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return _Pooled(transformers.LlamaModel(config))


class _Tied(nn.Module):
    """An output layer sharing the embedding's weight (GPT-2, Qwen2.5-0.5B): its gradient
    arrives as a view, the embedding's as a fresh tensor, and the engine sums them out of
    place (an H200 trace of Qwen2.5-0.5B: one vocabulary-sized tensor per backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100, 64)
        self.head = nn.Linear(64, 100, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(ids))


class _Pooled(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=ids).last_hidden_state


@pytest.mark.parametrize(
    ("build", "batch"),
    [
        (_Residual, lambda: torch.randn(8, 64)),
        (_resnet18, lambda: torch.randn(2, 3, 64, 64)),
        (_bert, lambda: torch.randint(0, 100, (2, 16))),
        (_llama, lambda: torch.randint(0, 100, (2, 16))),
        (_Tied, lambda: torch.randint(0, 100, (2, 16))),
    ],
    ids=["linear-residual", "resnet18", "bert", "llama", "tied-embedding"],
)
def test_trace_adds_gradients_out_of_place_exactly_where_a_plain_run_does(
    build: Callable[[], nn.Module], batch: Callable[[], torch.Tensor]
) -> None:
    x = batch()
    assert _traced_out_of_place_adds(build, x) == _plain_out_of_place_adds(build, x)
