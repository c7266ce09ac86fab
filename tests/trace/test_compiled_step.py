"""A model compiled as a whole with ``torch.compile`` is estimated as inductor compiles it: the
step is captured on fake CPU tensors, lowered for the GPU's CUDA with no GPU here, and the
generated wrappers run on meta tensors in the trace (their buffers, reuse and frees, what the
forward saves). The GPU check of the same path is benchmarks/compiled_lowering.py and the
held-out compiled workloads (benchmarks/results/2026-12-01-h200-user-steps-compiled).

A compile of even a small model takes seconds: the models here are tiny GPT-2s, each captured
once per module.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from memfit import Category, Estimate, UnsupportedWorkloadError, estimate
from memfit._gpus import resolve_gpu
from memfit.technique.compilation import memory_budget_words
from memfit.trace import trace_workload
from memfit.trace._compiled_replay import BUDGET_RESERVED_NOTE, wrapper_call
from memfit.workload import make_workload

pytest.importorskip("triton", reason="inductor's lowering for CUDA needs triton")
transformers = pytest.importorskip("transformers")

CONFIG = dict(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64, use_cache=False)


def _gpt2(compiled: bool = True) -> nn.Module:
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**CONFIG))
    model.loss_type = "ForCausalLM"
    return torch.compile(model) if compiled else model  # type: ignore[return-value]


def _batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 512, (2, 32))
    return {"input_ids": ids, "labels": ids}


@pytest.fixture(scope="module")
def train() -> tuple[Estimate, Estimate]:
    """The compiled estimate and the eager one (``compiled='eager'``) of the same step."""
    kwargs: dict[str, Any] = dict(gpu="h200", precision="bf16-mixed", optimizer="adamw")
    return estimate(_gpt2, _batch, **kwargs), estimate(_gpt2, _batch, compiled="eager", **kwargs)


def test_a_compiled_model_is_estimated_as_inductor_compiles_it(train: tuple[Estimate, Estimate]):
    compiled, eager = train
    assert compiled.notes[0].startswith(
        "the model is compiled with torch.compile: this is the compiled step as inductor"
    )
    assert torch.__version__ in compiled.notes[0]  # compiled memory depends on the version
    assert "compiled attention ran 2 x cudnn" in compiled.notes  # bf16 on an H200
    # fused kernels save fewer activations: less memory than the eager step, once compiled (the
    # first call of a tiny model peaks at Triton's tuning of its kernels on a cold cache)
    assert _steady_peak(compiled) < _steady_peak(eager)
    assert 0 < _held_for_backward(compiled) < _held_for_backward(eager)


def _steady_peak(est: Estimate) -> int:
    """The largest allocated memory of the last step (the first call's tuning is over)."""
    phases = est.timeline.phases
    last = max(name.partition(".")[0] for name, _ in phases if name.startswith("step"))
    begin = min(i for name, i in phases if name.startswith(last + "."))
    end = next((i for name, i in phases if name == "end"), len(est.timeline.allocated))
    return max(est.timeline.allocated[begin:end])


def _held_for_backward(est: Estimate) -> int:
    """What the second step's forward leaves for its backward (saved values, the outputs)."""
    starts = dict(est.timeline.phases)
    forward, backward = starts["step2.forward"], starts["step2.backward"]
    return est.timeline.allocated[backward - 1] - est.timeline.allocated[forward - 1]


def test_every_parameter_gets_its_gradient_from_the_compiled_backward():
    parameters = sum(p.numel() * 4 for p in {id(p): p for p in _gpt2(False).parameters()}.values())
    workload = make_workload(_gpt2, _batch, gpu="h200", precision="bf16-mixed")
    trace = trace_workload(workload, resolve_gpu("h200"))
    made: dict[tuple[Category, str], int] = {}
    for e in trace.events:
        if e.kind == "alloc" and e.info is not None:
            info = trace.infos[e.info]
            made[info.category, info.phase] = made.get((info.category, info.phase), 0) + e.size
    # each step's backward gives every parameter its gradient
    assert made[Category.GRADIENT, "step2.backward"] == parameters
    state = made[Category.OPTIMIZER_STATE, "step1.optimizer"]
    assert state == 2 * parameters  # AdamW's two moments, made by the first step
    # the wrapper calls cuDNN's attention backward by name: its dQ accumulator and softmax sums,
    # once per layer, as the H200 allocates them (b2 h2 s32 d32: 2x32x2x32x4 + 2x2x32x4 + 256)
    workspaces = [
        e.size
        for e in trace.events
        if e.kind == "alloc"
        and e.info is not None
        and trace.infos[e.info].phase == "step2.backward"
        and trace.infos[e.info].op.startswith("fused attention backward workspace")
    ]
    assert workspaces == [17152, 17152]


def test_a_compiled_inference_step_runs_the_inference_graph():
    compiled = estimate(
        _gpt2,
        lambda: {"input_ids": torch.randint(0, 512, (2, 32))},
        gpu="h200",
        mode="infer",
        precision="bf16",
        steps=2,
    )
    eager = estimate(
        _gpt2,
        lambda: {"input_ids": torch.randint(0, 512, (2, 32))},
        gpu="h200",
        mode="infer",
        precision="bf16",
        compiled="eager",
        steps=2,
    )
    assert compiled.notes[0].startswith("the model is compiled with torch.compile")
    assert (
        Category.GRADIENT not in compiled.by_category or not compiled.by_category[Category.GRADIENT]
    )
    assert _steady_peak(compiled) <= _steady_peak(eager)


def test_a_users_compiled_model_is_left_as_it_was():
    model = _gpt2()
    weight = model._orig_mod.transformer.wte.weight
    before = weight.detach().clone()
    estimate(model, _batch, gpu="h200")
    assert model._orig_mod.transformer.wte.weight is weight
    assert weight.device.type == "cpu" and torch.equal(weight.detach(), before)
    assert torch.compile is not None and not isinstance(weight, torch._subclasses.FakeTensor)


class Breaks(nn.Module):
    """A forward with a graph break (a Python value read off a tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.sum()) > 0:  # data-dependent: dynamo breaks the graph here
            return self.proj(x)
        return -self.proj(x)


def test_a_model_that_does_not_compile_to_one_graph_is_refused_with_the_way_out():
    with pytest.raises(UnsupportedWorkloadError, match=r"compiled='eager' \(--compiled eager\)"):
        estimate(torch.compile(Breaks()), lambda: torch.randn(4, 8), gpu="h200")


def test_batch_norm_updates_its_statistics_inside_the_compiled_graph():
    def make() -> nn.Module:
        return torch.compile(nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)))  # type: ignore[return-value]

    est = estimate(make, lambda: torch.randn(2, 3, 16, 16), gpu="h200", optimizer="sgd")
    # the running statistics are written in place by the graph (the wrapper's kernels):
    # nothing for the replay to copy back
    assert est.notes[0].startswith("the model is compiled with torch.compile")
    assert est.by_category[Category.BUFFER] == (8 + 8 + 1 * 2) * 4  # means, variances, count


WRAPPER = """
class Runner:
    def call(self, args):
        arg0_1, arg1_1, arg2_1 = args
        args.clear()
        assert_size_stride(arg0_1, (256, 768), (768, 1))
        with torch.cuda._DeviceGuard(0):
            torch.cuda.set_device(0)
            buf0 = empty_strided_cuda((256, 3072), (3072, 1), torch.float32)
            extern_kernels.mm(arg0_1, arg1_1, out=buf0)
            del arg0_1
            del arg1_1
            buf1 = buf0; del buf0  # reuse
            stream0 = get_raw_stream(0)
            triton_poi_fused_gelu_0.run(buf1, 786432, stream=stream0)
            buf2 = empty_strided_cuda((256, 768), (768, 1), torch.float32)
            extern_kernels.mm(buf1, arg2_1, out=buf2)
            del arg2_1
            del buf1
            buf6 = reinterpret_tensor(buf2, (128, 768), (768, 1), 98304); del buf2  # reuse
        return (buf6, )
"""


def test_an_inductor_wrapper_runs_on_meta_tensors():
    call = wrapper_call(WRAPPER)
    args = [
        torch.empty(256, 768, device="meta"),
        torch.empty(768, 3072, device="meta"),
        torch.empty(3072, 768, device="meta"),
    ]
    (out,) = call(args)
    assert args == []  # the wrapper takes its inputs over, as on the GPU
    assert out.device.type == "meta" and out.shape == (128, 768)
    assert out.storage_offset() == 98304 and out.untyped_storage().nbytes() == 256 * 768 * 4


def test_an_output_that_is_a_view_of_the_graphs_own_result_is_taken():
    """BERT's logits are a view of the decoder's matmul: the forward returns them with their
    base, and the backward takes the base's gradient."""

    def make() -> nn.Module:
        config = transformers.BertConfig(
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=128,
            vocab_size=1000,
        )
        model = transformers.BertForMaskedLM(config)
        model.loss_type = "ForMaskedLM"
        return torch.compile(model)  # type: ignore[return-value]

    def batch() -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 1000, (2, 32))
        return {"input_ids": ids, "labels": ids}

    compiled = estimate(make, batch, gpu="h200")
    eager = estimate(make, batch, gpu="h200", compiled="eager")
    # fp32 on an H200: efficient attention under transformers 5.24 (the math path under
    # 5.17, whose BERT passes a mask SDPA's fused kernels do not take in a compiled graph)
    assert any(note.startswith("compiled attention ran 2 x ") for note in compiled.notes)
    assert _steady_peak(compiled) < _steady_peak(eager)


def _vocabulary_1001() -> nn.Module:
    config = transformers.GPT2Config(**{**CONFIG, "vocab_size": 1001})
    return torch.compile(transformers.GPT2LMHeadModel(config))  # type: ignore[return-value]


def _ids_1001() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.randint(0, 1001, (2, 32))}


@functools.cache
def _inference_plan(precision: str) -> Any:
    from memfit._gpus import resolve_gpu
    from memfit.trace._compiled_capture import capture_compiled
    from memfit.workload import make_workload

    workload = make_workload(
        _vocabulary_1001, batch=_ids_1001, mode="infer", precision=precision, gpu="h200"
    )
    return capture_compiled(workload, resolve_gpu("h200"))


def test_the_first_compile_times_each_padded_matmul_as_on_the_gpu():
    """A vocabulary of 1,001 is padded to 1,008 for bf16 matmuls: on the GPU the first compile
    times that matmul padded and unpadded, with an L2-flush buffer between runs."""
    from memfit.trace._inductor import L2_FLUSH_BYTES

    plan = _inference_plan("bf16")
    (bench,) = plan.pad_benchmarks
    assert bench.op == "mm" and bench.padding == (0, 0, 7)  # the vocabulary, to 1,008
    assert bench.mat1[0] == (64, 64) and bench.mat2[0] == (64, 1001)
    assert "1008" in plan.forward  # padded
    est = estimate(_vocabulary_1001, _ids_1001, mode="infer", precision="bf16", gpu="h200")
    starts = dict(est.timeline.phases)
    first = est.timeline.allocated[starts["step1.forward"] :]
    steps = {b - a for a, b in itertools.pairwise(first)}
    assert L2_FLUSH_BYTES in steps  # the flush buffer between timed runs


def test_an_fp32_matmul_is_timed_but_not_padded_as_on_the_h200():
    """In plain fp32 the H200's timing found padding no faster (BERT-base's vocabulary of
    30,522, GPT-2's of 50,257): the first compile times the matmul all the same, and the
    wrapper keeps the vocabulary of 1,001 (a padded one would be 1,004)."""
    plan = _inference_plan("fp32")
    (bench,) = plan.pad_benchmarks
    assert bench.op == "mm" and bench.padding == (0, 0, 3)  # to 1,004, had it been padded
    assert "1004" not in plan.forward and "(64, 1001)" in plan.forward


def test_pad_mm_pads_the_matmuls_that_run_on_tensor_cores():
    from memfit.trace._inductor import pads_faster

    tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        assert pads_faster(torch.bfloat16) and pads_faster(torch.float16)
        assert not pads_faster(torch.float32)  # CUDA cores: the H200 left them unpadded
        torch.backends.cuda.matmul.allow_tf32 = True
        assert pads_faster(torch.float32)  # TF32 runs on tensor cores (not measured: padded)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


class Attention(nn.Module):
    """Scores, softmax and the weighted sum: the backward of the softmax may be written over
    the saved scores."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(64, 64)
        self.v = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = (self.q(x) @ x.transpose(-1, -2)).softmax(-1)
        return self.v(probs @ x)  # type: ignore[no-any-return]


def test_the_backward_writes_over_saved_tensors_as_on_the_gpu():
    """On the GPU inductor compiles the backward in AOTAutograd's context, which names the
    saved tensors the backward may reuse once read (donated buffers): BERT-base's backward
    (fp32, b32 x 512) writes its first layer's softmax gradient over the saved scores, where
    without them it made a new 384 MiB buffer."""
    from memfit._gpus import resolve_gpu
    from memfit.trace._compiled_capture import capture_compiled
    from memfit.workload import make_workload

    workload = make_workload(
        lambda: torch.compile(Attention()), batch=lambda: torch.randn(4, 128, 64), gpu="h200"
    )
    plan = capture_compiled(workload, resolve_gpu("h200"))
    assert plan.backward is not None
    assert re.search(r"buf\d+ = bmm; del bmm  # reuse", plan.backward)


class _Allocations(TorchDispatchMode):
    """The bytes of each tensor made on meta while active."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default):
            self.sizes.append(out.untyped_storage().nbytes())
        return out


def _wrapper_args() -> list[torch.Tensor]:
    return [
        torch.empty(256, 768, device="meta"),
        torch.empty(768, 3072, device="meta"),
        torch.empty(3072, 768, device="meta"),
    ]


def test_a_cold_cache_times_each_kernels_configs_at_its_first_call():
    """torch 2.11's autotuner, per config: a warm-up run on a clone of what the kernel writes,
    then the L2 flush buffer and the timed runs (a clone each, the same block again); once
    tuned, the kernel allocates nothing."""
    from memfit.trace._inductor import L2_FLUSH_BYTES, KernelTuning

    tuning = {"triton_poi_fused_gelu_0": KernelTuning(configs=2, mutated=(0,))}
    call = wrapper_call(WRAPPER, tuning)
    gelu_out = 256 * 3072 * 4
    for first in (True, False):
        args = _wrapper_args()
        with _Allocations() as made:
            call(args)
        timing = [gelu_out, L2_FLUSH_BYTES, gelu_out] * 2 if first else []
        assert made.sizes == [gelu_out, *timing, 256 * 768 * 4]
    args = _wrapper_args()
    with _Allocations() as warm:  # a warm cache: the plan's default
        wrapper_call(WRAPPER)(args)
    assert warm.sizes == [gelu_out, 256 * 768 * 4]


def test_the_kernels_configs_are_read_off_inductors_heuristics_on_the_cpu():
    plan = _inference_plan("bf16")
    assert not plan.tune_kernels  # replayed as a warm cache unless asked
    tuned = plan.tuning["forward"]
    assert tuned and "backward" not in plan.tuning  # inference: one wrapper
    for name, kernel in tuned.items():
        assert f"{name}.run(" in plan.forward
        assert kernel.configs > 1  # one config is never timed
    # a pointwise kernel of this size starts with two configs (autotune_pointwise)
    assert any(name.startswith("triton_poi") and k.configs == 2 for name, k in tuned.items())


def test_an_estimate_covers_the_first_run_that_reserves_the_most():
    """A cold cache's transients may leave segments that later buffers fit in (less reserved)
    or split those they would have taken (more): the run whose steps reserve the most wins."""
    from memfit._events import MemoryEvent
    from memfit.allocator import AllocatorConfig
    from memfit.trace._compiled_replay import first_run_reserving_most

    mib = 2**20

    @dataclasses.dataclass
    class Run:
        events: list[MemoryEvent]
        steps_start: int = 0

    def events(*ops: tuple[str, int, int]) -> list[MemoryEvent]:
        return [MemoryEvent(kind, block, size, 0) for kind, block, size in ops]

    warm = Run(events(("alloc", 1, 30 * mib), ("free", 1, 30 * mib)))
    # a 60 MiB flush freed, then the same 30 MiB buffer and a second one: both fit in it
    cold = Run(
        events(("alloc", 9, 60 * mib), ("free", 9, 60 * mib), ("alloc", 1, 30 * mib))
        + events(("alloc", 2, 30 * mib), ("free", 1, 30 * mib), ("free", 2, 30 * mib))
    )
    config = AllocatorConfig()
    assert first_run_reserving_most(warm, [cold], config) == (cold, True)  # 60 MiB against 30
    cold.steps_start = 2  # the flush before the steps: emptied from the cache, as a job starts
    assert first_run_reserving_most(warm, [cold], config) == (cold, True)  # 2 x 30 MiB still
    flush = events(("alloc", 9, 60 * mib), ("free", 9, 60 * mib))
    one = Run(flush + warm.events, steps_start=2)  # one buffer: 30 MiB either way
    assert first_run_reserving_most(warm, [one], config) == (warm, False)
    # of several cold runs (tuned, and tuned with the padding decided), the one reserving most
    assert first_run_reserving_most(warm, [one, cold], config) == (cold, True)
    assert first_run_reserving_most(warm, [], config) == (warm, False)


# -- torch.compile's activation memory budget --------------------------------------------------

TRAIN: dict[str, Any] = dict(gpu="h200", precision="bf16-mixed", optimizer="adamw")


@pytest.fixture(scope="module")
def at_zero() -> Estimate:
    """The compiled step with an activation memory budget of 0: recompute all it can."""
    return estimate(_gpt2, _batch, activation_memory_budget=0.0, **TRAIN)


def test_an_activation_memory_budget_reaches_inductors_partitioner(
    train: tuple[Estimate, Estimate], at_zero: Estimate
):
    at_one = train[0]
    assert _held_for_backward(at_zero) < _held_for_backward(at_one) / 2
    assert memory_budget_words(0.0, True) in at_zero.notes
    assert BUDGET_RESERVED_NOTE in at_zero.notes and BUDGET_RESERVED_NOTE not in at_one.notes
    assert not any("activation memory budget" in note for note in at_one.notes)
    import torch._functorch.config as functorch_config

    assert functorch_config.activation_memory_budget == 1.0  # the process's, restored


def test_without_a_budget_the_processs_setting_is_used_and_named(at_zero: Estimate):
    import torch._functorch.config as functorch_config

    with functorch_config.patch(activation_memory_budget=0.0):
        est = estimate(_gpt2, _batch, **TRAIN)
    assert est.peak_allocated == at_zero.peak_allocated
    assert _held_for_backward(est) == _held_for_backward(at_zero)
    assert memory_budget_words(0.0, False) in est.notes
    assert "as set in this process" in memory_budget_words(0.0, False)
