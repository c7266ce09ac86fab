"""``memfit.configure``: the knobs each framework gets, the errors, and "too late".

The planning runs on given environments (``environ=``, as ``memfit run``'s parent
does); what happens inside a process runs in a fresh Python (``_run``), since importing torch is
what makes its allocator settings too late. TensorFlow and JAX themselves are in
``tests/frameworks`` (CI's frameworks build installs them).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import pytest

from memfit._errors import InvalidInputError, NoGPUError
from memfit.monitor import (
    ConfigurationWarning,
    MemoryInfo,
    configure,
    stats,
)

GIB = 2**30


class FakeNvml:
    """Two GPUs, 80 GiB and 140 GiB."""

    sizes = (80 * GIB, 140 * GIB)

    def device_count(self) -> int:
        return len(self.sizes)

    def uuid(self, index: int) -> str:
        return f"GPU-{index}"

    def memory(self, index: int, version: int) -> MemoryInfo:
        return MemoryInfo(self.sizes[index], 0, self.sizes[index], None)

    def close(self) -> None:
        return None


def _no_gpu() -> Any:
    raise NoGPUError("No NVIDIA driver found.")


def _plan(env: dict[str, str] | None = None, **kwargs: Any) -> tuple[Any, dict[str, str]]:
    env = {} if env is None else env
    kwargs.setdefault("framework", "all")
    kwargs.setdefault("open_nvml", FakeNvml)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigurationWarning)
        found = configure(environ=env, **kwargs)
    return found, env


def _status(found: Any) -> dict[tuple[str, str], str]:
    return {(a.framework, a.setting): a.status for a in found.actions}


def test_growth_and_a_size_limit_set_every_framework_on_the_smallest_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    found, env = _plan(growth=True, limit="8GiB")
    assert found.gpu_total == 80 * GIB
    assert found.settings["limit_bytes"] == 8 * GIB
    assert found.settings["limit_fraction"] == pytest.approx(0.1)
    assert found.settings["limit_given"] == "bytes"  # torch divides by its own total
    assert env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    fraction = {k: v for k, v in env.items() if k.endswith("MEM_FRACTION")}
    assert list(fraction.values()) == ["0.1"]
    status = _status(found)
    assert status[("torch", "growth")] == "already"  # PyTorch grows anyway
    assert status[("torch", "limit")] == "pending"  # at CUDA start, in the process
    assert status[("tensorflow", "limit")] == "pending"  # at import: a logical device
    assert found.problems == []
    assert found.environment() == env


def test_visible_devices_choose_the_gpu_whose_size_counts(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    found, _ = _plan(limit="70GiB")
    assert found.gpu_total == 140 * GIB
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0,GPU-1")
    with pytest.raises(InvalidInputError, match=r"larger than the GPU \(80.00 GiB\)"):
        _plan(limit="90GiB")


def test_a_share_needs_no_gpu_but_tensorflow_then_cannot_take_it():
    found, env = _plan(limit="25%", open_nvml=_no_gpu)
    assert found.gpu_total is None
    assert found.settings == {
        "growth": None,
        "allocator": None,
        "limit_bytes": None,
        "limit_fraction": 0.25,
        "limit_given": "share",
    }
    assert [v for k, v in env.items() if k.endswith("MEM_FRACTION")] == ["0.25"]
    (problem,) = found.problems
    assert (problem.framework, problem.setting, problem.status) == (
        "tensorflow",
        "limit",
        "unsupported",
    )
    assert "give the limit as a size" in problem.why


def test_the_allocator_names_map_to_each_frameworks_own():
    _, env = _plan(allocator="cudaMallocAsync")
    assert env == {
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
        "TF_GPU_ALLOCATOR": "cuda_malloc_async",
        "XLA_PYTHON_CLIENT_ALLOCATOR": "cuda_async",
    }
    _, env = _plan(allocator="platform", framework=["torch", "jax"])
    assert env == {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}


def test_torch_settings_of_the_user_are_kept_and_replaced_ones_said():
    env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,backend:native"}
    found, env = _plan(env, allocator="expandable", framework="torch")
    assert (
        env["PYTORCH_CUDA_ALLOC_CONF"]
        == "max_split_size_mb:128,backend:native,expandable_segments:True"
    )
    found, env = _plan(env, allocator="default", framework="torch")
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"
    why = [a.why for a in found.actions if a.status == "set" and a.why.startswith("was ")]
    assert why == [
        "was max_split_size_mb:128,backend:native,expandable_segments:True",
        "was max_split_size_mb:128,expandable_segments:True",
    ]


def test_the_jax_fraction_replaces_the_other_name_jax_refuses_both():
    env = {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9", "XLA_CLIENT_MEM_FRACTION": ".9"}
    _, env = _plan(env, limit=0.5, framework="jax")
    assert [v for k, v in env.items() if k.endswith("MEM_FRACTION")] == ["0.5"]


def test_preallocate_is_growth_turned_round():
    _, env = _plan(preallocate=True, framework=["jax", "tensorflow"])
    assert env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "TF_FORCE_GPU_ALLOW_GROWTH": "false"}
    _, env = _plan(growth=False, preallocate=True, framework="jax")
    assert env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"growth": True, "preallocate": True}, r"contradict each other"),
        ({"growth": "yes"}, r"growth='yes' is not accepted; give True or False"),
        ({"limit": "8"}, r"limit='8' has no unit.*'8GiB'"),
        ({"limit": "1e9"}, r"limit='1e9' has no unit.*'1e9GiB'"),
        ({"limit": "-8"}, r"limit='-8' is below zero"),
        ({"limit": "1e30GiB"}, r"'1e30GiB' is more than 1 PiB"),
        ({"limit": -1}, r"negative"),
        ({"limit": "-2GiB"}, r"below zero"),
        ({"limit": 0}, r"no memory"),
        ({"limit": 1.5}, r"not a share of the GPU"),
        ({"limit": "150%"}, r"not a share of the GPU"),
        ({"limit": "lots"}, r"not understood"),
        ({"limit": "200GiB"}, r"larger than the GPU \(80.00 GiB\)"),
        ({"allocator": "magic"}, r"allocator='magic' is not one memfit knows"),
        ({"growth": True, "framework": "mxnet"}, r"framework='mxnet' is not one memfit"),
        ({"growth": True, "framework": []}, r"names no framework"),
        ({}, r"was given no setting"),
        ({"preallocate": True, "framework": "torch"}, r"torch cannot take the setting growth"),
        ({"allocator": "platform", "framework": "tf"}, r"tensorflow cannot take the setting"),
    ],
)
def test_bad_settings_are_refused_and_nothing_is_changed(monkeypatch, kwargs, message):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}
    with pytest.raises(InvalidInputError, match=message):
        _plan(env, **kwargs)
    assert env == {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}


def test_under_auto_what_a_framework_lacks_is_a_warning():
    with pytest.warns(ConfigurationWarning) as caught:
        configure(allocator="expandable", framework="all", environ={})
    assert sorted(str(w.message).split(" is not")[0] for w in caught) == [
        "memfit.configure: jax allocator",
        "memfit.configure: tensorflow allocator",
    ]


def _run(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``code`` in a fresh Python; it prints one JSON document last."""
    import os

    full = {**os.environ, **(env or {})}
    full.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_in_a_process_torch_settings_before_import_are_set_and_after_are_too_late():
    out = _run(
        """
        import json, os, warnings
        import memfit
        before = memfit.configure(allocator="async", limit=0.5, framework="torch")
        import torch
        ask = getattr(torch._C, "_cuda_getAllocatorBackend", None)
        backend = ask() if ask else None
        queued = any("_torch_limit" in repr(c[0]) for c in torch.cuda._queued_calls)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            after = memfit.configure(allocator="default", framework="torch")
        try:
            memfit.configure(allocator="async", framework="torch", strict=True)
            strict = None
        except memfit.monitor.ConfigurationTooLateError as exc:
            strict = str(exc)
        print(json.dumps({
            "before": [(a.setting, a.status) for a in before.actions],
            "after": [(a.setting, a.status) for a in after.actions],
            "env": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
            "backend": backend, "queued": queued, "strict": strict,
            "warned": [str(w.message) for w in caught],
        }))
        """
    )
    assert out["before"] == [["limit", "pending"], ["allocator", "set"]]
    assert out["backend"] in (None, "cudaMallocAsync")  # torch read it at import
    assert out["queued"]  # the limit waits for CUDA to start
    # torch was imported: its allocator settings were read then; the variable is left alone
    assert ["allocator", "too late"] in out["after"]
    assert out["env"] == "backend:cudaMallocAsync"
    assert any("torch allocator is not in effect (too late)" in w for w in out["warned"])
    assert out["strict"].startswith("Too late for torch allocator")


def test_expandable_segments_are_turned_on_in_a_torch_already_imported():
    out = _run(
        """
        import json
        import torch, memfit
        found = memfit.configure(allocator="expandable", framework="torch")
        get = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
        print(json.dumps({"actions": [(a.setting, a.status) for a in found.actions],
                          "settings": get() if get else None}))
        """
    )
    assert out["actions"] == [["allocator", "applied"]]
    assert out["settings"] in (None, "expandable_segments:True")


def test_a_limit_waits_for_the_import_of_torch():
    out = _run(
        """
        import json, sys
        import memfit
        from memfit.monitor import _frameworks
        memfit.configure(limit=0.5, framework="torch")
        waiting = _frameworks.pending_imports()
        import torch
        queued = any("_torch_limit" in repr(c[0]) for c in torch.cuda._queued_calls)
        print(json.dumps({"waiting": waiting, "after": _frameworks.pending_imports(),
                          "queued": queued}))
        """
    )
    assert out == {"waiting": ["torch"], "after": [], "queued": True}


def test_stats_are_empty_before_a_runtime_starts():
    assert stats() == []
    with pytest.raises(InvalidInputError, match="not one memfit configures"):
        stats("mxnet")
