"""How long something takes on the GPU: CUDA events around repeated launches, or around the
replays of a CUDA graph when the host's launch would be longer than the kernel."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch


def gpu_seconds(fn: Callable[[], Any], reps: int = 20, repeats: int = 5) -> float:
    """Median seconds of one ``fn()`` on the GPU, ``reps`` back to back per timing, after
    three calls of warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return float(statistics.median(times))


def graph_seconds(fn: Callable[[], Any], reps: int, replays: int = 5) -> float:
    """Median seconds of one ``fn()`` replayed inside a CUDA graph of ``reps`` calls: the GPU's
    time with no host launch in the way (warm-up on a side stream before the capture, as
    PyTorch's CUDA graph notes ask; cuDNN picks its engine there)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    del graph
    return float(statistics.median(times))
