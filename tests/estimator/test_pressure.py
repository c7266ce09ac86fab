"""The least memory a step runs in: the allocator emulator at a capacity, on real traces."""

from __future__ import annotations

import pytest
import torch

from memfit._gpus import resolve_gpu
from memfit.allocator import AllocatorConfig
from memfit.estimator._pressure import TOLERANCE, least_capacity, runs_within
from memfit.trace import trace_workload
from memfit.workload._step import Workload

torchvision = pytest.importorskip("torchvision")


@pytest.fixture(scope="module")
def resnet_trace():
    def batch():
        return torch.randn(1, 3, 224, 224).expand(32, -1, -1, -1), torch.randint(0, 10, (32,))

    def loss(model, b):
        return torch.nn.functional.cross_entropy(model(b[0]), b[1])

    work = Workload(lambda: torchvision.models.resnet18(num_classes=10), batch, loss)
    return trace_workload(work, resolve_gpu("h100"))


def _peaks(trace, config):
    from memfit.estimator._estimate import _replay

    allocated, reserved, _ = _replay(trace, config)
    return max(allocated), max(reserved)


def test_the_step_runs_in_its_least_capacity_and_not_in_less(resnet_trace):
    config = AllocatorConfig()
    allocated, reserved = _peaks(resnet_trace, config)
    least = least_capacity(resnet_trace, config, allocated, reserved)
    assert allocated <= least <= reserved
    assert runs_within(resnet_trace, config, least)
    assert runs_within(resnet_trace, config, reserved)  # plenty: never out of memory
    assert not runs_within(resnet_trace, config, allocated - 1)  # nothing runs in less
    if least - TOLERANCE > allocated:
        assert not runs_within(resnet_trace, config, least - TOLERANCE - 1)


def test_freeing_the_cache_lets_the_step_run_in_less_than_its_peak_reserved(resnet_trace):
    # a CNN's activations leave cached blocks the next layers cannot use: under pressure the
    # allocator frees them and retries (seen on an H200: ResNet-50 fp32 ran 20% above the
    # batch whose free-running peak reserved filled the GPU)
    config = AllocatorConfig()
    allocated, reserved = _peaks(resnet_trace, config)
    assert least_capacity(resnet_trace, config, allocated, reserved) < reserved


def test_running_in_less_than_the_peak_reserved_costs_cache_frees(resnet_trace):
    from memfit.estimator._pressure import retries_within

    config = AllocatorConfig()
    allocated, reserved = _peaks(resnet_trace, config)
    least = least_capacity(resnet_trace, config, allocated, reserved)
    assert retries_within(resnet_trace, config, reserved) == 0  # memory to spare: none
    assert retries_within(resnet_trace, config, least) > 0  # it runs only by freeing its cache
    assert retries_within(resnet_trace, config, allocated - 1) is None  # it does not run


def test_the_verdict_says_when_a_step_fits_only_by_freeing_the_cache():
    import memfit

    def batch():
        return torch.randn(1, 3, 224, 224).expand(32, -1, -1, -1), torch.randint(0, 10, (32,))

    def loss(model, b):
        return torch.nn.functional.cross_entropy(model(b[0]), b[1])

    def model():
        return torchvision.models.resnet18(num_classes=10)

    roomy = memfit.estimate(model, batch, loss_fn=loss, gpu="8GiB").fits()
    assert roomy.fits and not roomy.tight
    free_running = memfit.estimate(model, batch, loss_fn=loss, gpu="8GiB").total
    # between what it needs and its free-running peak: it fits, tightly
    est = memfit.estimate(model, batch, loss_fn=loss, gpu=f"{free_running - (64 << 20)}B")
    verdict = est.fits()
    assert verdict.fits and verdict.tight and verdict.alloc_retries
    assert est.least_capacity + est.non_pytorch == verdict.needed < est.total
    assert est.to_dict()["gpu"]["tight"] is True
    # below what it needs: it does not fit, short by the difference from the need
    short = memfit.estimate(model, batch, loss_fn=loss, gpu=f"{verdict.needed - (1 << 20)}B")
    assert not short.fits().fits and short.fits().needed == verdict.needed


def test_the_cache_frees_are_counted_step_by_step():
    # four steps of ResNet-18: with room to spare none frees its cache; halfway between the
    # least capacity and the peak reserved the first step frees it once and the layout it
    # leaves serves the rest (the step settles); at the least capacity every step frees it
    from memfit.estimator import retries_by_step, retries_within

    def batch():
        return torch.randn(1, 3, 224, 224).expand(32, -1, -1, -1), torch.randint(0, 10, (32,))

    def loss(model, b):
        return torch.nn.functional.cross_entropy(model(b[0]), b[1])

    work = Workload(lambda: torchvision.models.resnet18(num_classes=10), batch, loss, steps=4)
    trace = trace_workload(work, resolve_gpu("h100"))
    config = AllocatorConfig()
    allocated, reserved = _peaks(trace, config)
    least = least_capacity(trace, config, allocated, reserved)
    assert retries_by_step(trace, config, reserved) == [0, 0, 0, 0]
    settling = retries_by_step(trace, config, (least + reserved) // 2)
    assert settling is not None and settling[0] > 0 and settling[-2:] == [0, 0]
    tight = retries_by_step(trace, config, least)
    assert tight is not None and all(tight)
    assert sum(tight) == retries_within(trace, config, least)
    assert retries_by_step(trace, config, allocated - 1) is None


def test_a_memory_fraction_refuses_the_whole_request_where_a_full_gpu_maps_the_rest():
    # expandable segments: 80 MiB mapped, the last 40 free; a 60 MiB request maps only 20 more
    # on a GPU with 100 MiB, but torch's fraction check counts the whole request (80 + 60 >
    # 100): the cache is freed and the request retried; the layout it leaves serves the next
    # steps
    from memfit._events import MemoryEvent
    from memfit.estimator import released_by_step, retries_by_step
    from memfit.trace import Trace

    mib = 1 << 20
    events, phases = [], []
    for step in (1, 2, 3):
        phases.append((f"step{step}.forward", len(events)))
        base = 10 * step
        events += [
            MemoryEvent("alloc", base, 40 * mib),
            MemoryEvent("alloc", base + 1, 40 * mib),
            MemoryEvent("free", base + 1, 40 * mib),
            MemoryEvent("alloc", base + 2, 60 * mib),
            MemoryEvent("free", base + 2, 60 * mib),
            MemoryEvent("free", base, 40 * mib),
        ]
    trace = Trace(events=events, infos=[], phases=phases, steps_start=0, parameters=0)
    config = AllocatorConfig.parse("expandable_segments:True")
    assert retries_by_step(trace, config, 100 * mib) == [0, 0, 0]
    assert retries_by_step(trace, config, 100 * mib, as_fraction=True) == [1, 0, 0]
    # the free gives the 40 free MiB back to the driver (the 60 MiB request maps them again)
    assert released_by_step(trace, config, 100 * mib) == [0, 0, 0]
    assert released_by_step(trace, config, 100 * mib, as_fraction=True) == [40 * mib, 0, 0]
    assert retries_by_step(trace, config, 90 * mib) is None
    assert retries_by_step(trace, config, 90 * mib, as_fraction=True) is None
