"""cuDNN convolution workspaces, from measurements on a real GPU.

cuDNN chooses a convolution engine by its own heuristics and takes that engine's workspace from
the caching allocator for the duration of the call: nothing else in the step is as large and as
short-lived (257 MB for ResNet-50's 7x7 stem at batch 128 in fp16, next to a 205 MB output).
The size depends on the engine, which cannot be derived from the shapes, so memfit looks it up in
a table measured on an H200 (``benchmarks/cudnn_probe.py`` -> ``benchmarks/build_cudnn_table.py``)
for the convolutions of the catalog's CNNs, per dtype and layout (channels-last where the model
hands cuDNN a permuted tensor), at batch 32 and 128 and others; and after a bias gradient, the
scratch its reduction takes (a channels-last one: 4x the output's bf16 bytes). Other batch sizes are
interpolated (most workspaces grow linearly with the batch); convolutions not in the table take
no workspace. Both cases are named in the estimate's notes.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from importlib import resources
from typing import Any

import torch

from memfit._gpus import DEFAULT_ARCHITECTURE
from memfit.trace._layouts import channels_last

__all__ = ["ConvWorkspaces", "cudnn_data"]

_DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


@functools.cache
def cudnn_data(table: str) -> dict[str, Any]:
    """A measured cuDNN table (``memfit/trace/data``, named by
    :attr:`memfit._gpus.Architecture.cudnn_table`), read once."""
    text = resources.files("memfit.trace").joinpath(f"data/{table}").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def _table(
    table: str = DEFAULT_ARCHITECTURE.cudnn_table,
) -> dict[str, dict[str, dict[str, list[int]]]]:
    conv: dict[str, dict[str, dict[str, list[int]]]] = cudnn_data(table)["conv"]
    return conv


def _key(
    x: torch.Tensor,
    weight: torch.Tensor,
    stride: Sequence[int],
    padding: Sequence[int],
    groups: int,
) -> str | None:
    dtype = _DTYPES.get(x.dtype)
    if dtype is None or x.dim() != 4 or weight.dim() != 4:
        return None
    _, c, h, w = (int(s) for s in x.shape)
    k, _, kh, kw = (int(s) for s in weight.shape)
    fields = [c, h, w, k, kh, kw, *(int(s) for s in stride), *(int(p) for p in padding), groups]
    # cuDNN runs a channels-last convolution with other engines, measured apart (|nhwc: the
    # probe runs a convolution channels-last where the model hands it a permuted tensor)
    layout = "|nhwc" if channels_last(x) else ""
    return ",".join(str(f) for f in fields) + f"|{dtype}{layout}"


def _at_batch(by_batch: dict[str, list[int]], batch: int) -> tuple[list[int], bool]:
    """Workspaces at ``batch``: measured, or interpolated linearly between the probed sizes."""
    if str(batch) in by_batch:
        return by_batch[str(batch)], True
    probed = sorted(int(b) for b in by_batch)
    below = [b for b in probed if b < batch]
    above = [b for b in probed if b > batch]
    if below and above:
        b0, b1 = below[-1], above[0]
        w0, w1 = by_batch[str(b0)], by_batch[str(b1)]
        if len(w0) == len(w1):
            t = (batch - b0) / (b1 - b0)
            return [round(a + (b - a) * t) for a, b in zip(w0, w1, strict=True)], False
    nearest = min(probed, key=lambda b: abs(b - batch))
    return [round(s * batch / nearest) for s in by_batch[str(nearest)]], False


class ConvWorkspaces:
    """Looks up what cuDNN allocates inside each convolution of a trace, and counts misses;
    ``table`` is the architecture's measured table."""

    def __init__(self, table: str = DEFAULT_ARCHITECTURE.cudnn_table) -> None:
        self.table = table
        self.interpolated = 0
        self.unknown: set[str] = set()

    def forward(self, args: tuple[Any, ...]) -> list[int]:
        x, weight, _, stride, padding, dilation, transposed, _, groups = args[:9]
        return self._lookup(x, weight, stride, padding, dilation, transposed, groups, ["fwd"])

    def backward(self, args: tuple[Any, ...]) -> dict[int, list[int]]:
        """Workspaces by the output they follow: 0 the input gradient, 1 the weight gradient,
        2 the bias gradient (its reduction's scratch: in the tables probed from 2026-12-02 on)."""
        _, x, weight, _, stride, padding, dilation, transposed, _, groups, mask = args[:11]
        return {
            i: self._lookup(x, weight, stride, padding, dilation, transposed, groups, [phase])
            for i, phase in enumerate(("dgrad", "wgrad", "bias"))
            if mask[i]
        }

    def _lookup(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        transposed: bool,
        groups: int,
        phases: list[str],  # of "fwd", "dgrad", "wgrad"
    ) -> list[int]:
        if transposed or any(int(d) != 1 for d in dilation):
            return []
        key = _key(x, weight, stride, padding, int(groups))
        if key is None:
            return []
        entry = _table(self.table).get(key)
        if entry is None:
            self.unknown.add(key.split("|")[0])
            return []
        out: list[int] = []
        for phase in phases:
            if not entry.get(phase):  # a phase the table's probes did not split out
                continue
            sizes, exact = _at_batch(entry[phase], int(x.shape[0]))
            self.interpolated += not exact
            out += sizes
        return out

    def notes(self) -> list[str]:
        """What the estimate should say about the workspaces it could not read off the table."""
        notes = []
        if self.interpolated:
            notes.append(
                f"cuDNN workspaces of {self.interpolated} convolution calls interpolated "
                "from H200 measurements at other batch sizes"
            )
        if self.unknown:
            notes.append(
                f"{len(self.unknown)} convolution shapes have no measured cuDNN workspace "
                "(counted as none)"
            )
        return notes
