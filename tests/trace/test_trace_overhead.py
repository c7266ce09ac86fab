"""What keeps a trace's per-op overhead down: the recorder's dispatch hook runs unwrapped, and
metadata reads are answered first by the function mode, unchanged."""

from __future__ import annotations

import torch

from memfit.trace._function_mode import _METADATA, TraceFunctionMode
from memfit.trace._recorder import Recorder


def test_recorder_dispatch_is_not_wrapped_by_dynamo() -> None:
    hook = Recorder.__dict__["__torch_dispatch__"]
    assert not hasattr(hook, "__wrapped__")  # torch._disable_dynamo would wrap it


def test_metadata_reads_pass_through_the_function_mode() -> None:
    t = torch.empty(2, 3, 4, device="meta").transpose(0, 1)
    stamped: list[object] = []
    with TraceFunctionMode(90, on_output=stamped.append):
        got = (t.shape, t.dtype, t.device, t.numel(), t.stride(), t.dim(), t.is_contiguous())
        offset, size = t.storage_offset(), t.size(1)
    assert got == (
        torch.Size([3, 2, 4]),
        torch.float32,
        torch.device("meta"),
        24,
        (4, 12, 1),
        3,
        False,
    )
    assert (offset, size) == (0, 2)
    assert stamped == []  # answered before the mode's other work
    assert torch.Tensor.numel in _METADATA and torch.Tensor.shape.__get__ in _METADATA
