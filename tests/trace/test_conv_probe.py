"""Convolution workspaces probed on this machine: which convolutions a workload needs probed,
how a probe's history becomes workspaces, how they are kept, and how estimates read them.

The GPU run itself is ``tests/gpu/test_probe_convolutions_gpu.py``; here the probe rows are
written as a GPU's history would read (the convolution's own tensors, and a workspace after
its output), from the configuration's own sizes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memfit._errors import NoGPUError
from memfit.trace import _cudnn
from memfit.trace._conv_probe import (
    ELEMENT,
    config_key,
    output_spatial,
    recorded_convolutions,
    save_probes,
    spatial,
    split_workspaces,
    unanswered,
)
from memfit.trace._cudnn import ConvWorkspaces, user_table_path

# a shape no probe of the package ran (odd channels and size), fp32, at batch 3
ODD = {
    "c": 37, "h": 61, "w": 59, "k": 53, "kernel": [5, 5], "stride": [1, 1], "padding": [2, 2],
    "groups": 1, "bias": True, "batch": 3, "dtype": "fp32",
}  # fmt: skip
WORKSPACE = 1_234_432


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder for this machine's probes."""
    monkeypatch.setenv("MEMFIT_CUDNN_DIR", str(tmp_path))
    return tmp_path


def _inference_probe(cfg: dict[str, Any], workspace: int) -> dict[str, Any]:
    """A probe row of an inference call as the GPU records it: the output, then cuDNN's
    workspace, freed when the call ends."""
    out = cfg["batch"] * cfg["k"] * math.prod(output_spatial(cfg)) * ELEMENT[cfg["dtype"]]
    trace = [["alloc", out], ["alloc", workspace], ["free_completed", workspace]]
    return {**cfg, "train": False, "trace": trace}


def _args(cfg: dict[str, Any]) -> tuple[Any, ...]:
    x = torch.empty(cfg["batch"], cfg["c"], *spatial(cfg), device="meta")
    w = torch.empty(cfg["k"], cfg["c"], *cfg["kernel"], device="meta")
    return (x, w, None, cfg["stride"], cfg["padding"], [1, 1], False, [0, 0], cfg["groups"])


def test_a_probes_history_splits_into_the_forwards_workspace() -> None:
    found = split_workspaces(_inference_probe(ODD, WORKSPACE))
    assert found == {"fwd": [WORKSPACE], "dgrad": [], "wgrad": [], "bias": []}


def test_probes_kept_on_this_machine_answer_later_lookups(machine: Path) -> None:
    before = ConvWorkspaces()
    bounded = before.forward(_args(ODD))
    assert before.unknown and not before.from_user  # not in the package's table
    path = save_probes([_inference_probe(ODD, WORKSPACE)], 90)
    assert path == user_table_path(90) and path.parent == machine
    after = ConvWorkspaces()
    assert after.forward(_args(ODD)) == [WORKSPACE] != bounded
    assert not after.unknown
    assert any("probed on this machine" in note for note in after.notes())
    # another architecture's estimates do not read them
    assert ConvWorkspaces(sm=80).forward(_args(ODD)) == bounded


def test_a_second_probe_adds_to_what_the_machine_kept(machine: Path) -> None:
    save_probes([_inference_probe(ODD, WORKSPACE)], 90)
    other = {**ODD, "batch": 5}
    save_probes([_inference_probe(other, 2 * WORKSPACE)], 90)
    ws = ConvWorkspaces()
    assert ws.forward(_args(ODD)) == [WORKSPACE]
    assert ws.forward(_args(other)) == [2 * WORKSPACE]
    assert not list(machine.glob("*.partial"))  # written whole


def test_the_packages_table_wins_and_a_broken_file_is_ignored(machine: Path) -> None:
    import json

    key, entry = next((k, e) for k, e in _cudnn._packaged().items() if e.get("fwd"))
    batch, sizes = next(iter(entry["fwd"].items()))
    mine = {"fwd": {batch: [s + 512 for s in sizes] or [512], "999999": [7]}}
    user_table_path(90).write_text(json.dumps({"conv": {key: mine}}))
    table, taken = _cudnn._table_and_user_keys()
    assert table[key]["fwd"][batch] == sizes  # measured in the package: kept
    assert table[key]["fwd"]["999999"] == [7] and key in taken  # a gap: filled
    user_table_path(90).write_text("not json")
    os.utime(user_table_path(90), ns=(1, 1))  # another stamp: read again
    assert _cudnn._table_and_user_keys()[0] == _cudnn._packaged()


class _Odd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(37, 53, 5, padding=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_a_workloads_convolutions_the_table_lacks_are_the_ones_to_probe(machine: Path) -> None:
    from memfit._gpus import resolve_gpu
    from memfit.trace import trace_workload
    from memfit.workload import make_workload

    work = make_workload(_Odd, lambda: torch.randn(3, 37, 61, 59), precision="fp32")
    with recorded_convolutions() as seen:
        trace_workload(work, resolve_gpu("h100"))
    missing = unanswered(list(seen.values()), 90)
    assert [config_key(c) for c in missing] == [config_key(ODD)]
    assert missing[0]["train"] and missing[0]["batch"] == 3


def test_probing_needs_a_gpu() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    import memfit

    with pytest.raises(NoGPUError, match="no CUDA GPU is available"):
        memfit.probe_convolutions(_Odd, lambda: torch.randn(3, 37, 61, 59))


def test_probes_of_one_architecture_are_refused_for_another(monkeypatch) -> None:
    import memfit
    from memfit._errors import InvalidInputError
    from memfit._gpus import GPU
    from memfit.estimator import _probe_convs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    a100 = GPU("NVIDIA A100-SXM4-80GB", 80 * 2**30, (8, 0))
    monkeypatch.setattr(_probe_convs, "_local_gpu", lambda: a100)
    with pytest.raises(InvalidInputError, match=r"compute capability 9\.0.*A100.*8\.0"):
        memfit.probe_convolutions(_Odd, lambda: torch.randn(3, 37, 61, 59), gpu="h100")
