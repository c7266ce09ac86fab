"""``memfit doctor``: the findings and the advice, from a fake NVML and given environments; the
command line on this machine (no GPU)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from memfit._errors import NoGPUError
from memfit.cli import main
from memfit.monitor import MemoryInfo, diagnose
from memfit.monitor._doctor_procs import read_environ  # the real one, before the fixture

GIB = 2**30


class FakeNvml:
    """Two GPUs: GPU 0 with MIG on and another process on it, GPU 1 free."""

    def __init__(self, cuda: int = 13000) -> None:
        self.cuda = cuda

    def driver_version(self) -> str:
        return "580.159.04"

    def cuda_driver_version(self) -> int:
        return self.cuda

    def device_count(self) -> int:
        return 2

    def name(self, index: int) -> str:
        return "NVIDIA H200"

    def memory(self, index: int, version: int) -> MemoryInfo:
        used = 3 * GIB if index == 0 else 0
        return MemoryInfo(140 * GIB, used, 140 * GIB - used, None)

    def mig_mode(self, index: int) -> bool:
        return index == 0

    def processes(self, index: int, kind: str) -> list[tuple[int, int | None]]:
        return [(4242, 3 * GIB)] if index == 0 and kind == "compute" else []

    def close(self) -> None:
        return None


def _no_gpu() -> Any:
    raise NoGPUError("No NVIDIA driver found (NVML could not be loaded). Install it.")


def _installed(*packages: str) -> Any:
    versions = {p: "1.0" for p in packages}
    return versions.get


def _advice(found: Any) -> dict[str, str]:
    return {a.setting.split("=")[0]: a.severity for a in found.advice}


def test_a_machine_without_a_gpu_still_reports_and_says_why() -> None:
    found = diagnose({}, _no_gpu, _installed())
    assert found.gpus == [] and found.driver is None
    assert "No NVIDIA driver found" in (found.nvml_error or "")
    assert _advice(found) == {"GPUs": "info"}
    assert [f.name for f in found.frameworks] == ["torch", "tensorflow", "jax"]
    assert json.loads(json.dumps(found.to_dict()))["units"] == "bytes"


def test_gpus_mig_and_other_processes_are_reported() -> None:
    found = diagnose({}, FakeNvml, _installed())
    assert found.driver == "580.159.04" and found.cuda_driver == "13.0"
    assert [(g.index, g.mig, len(g.processes)) for g in found.gpus] == [(0, True, 1), (1, False, 0)]
    advice = _advice(found)
    assert advice["GPU 0 MIG mode"] == "info" and advice["GPU 0 processes"] == "info"
    assert "GPU 1 processes" not in advice


@pytest.mark.parametrize(
    ("env", "packages", "setting", "severity"),
    [
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable:yes"}, (), "PYTORCH_CUDA_ALLOC_CONF", "error"),
        ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, (), "PYTORCH_NO_CUDA_MEMORY_CACHING", "warning"),
        ({}, ("jax", "jax-cuda12-plugin"), "XLA_PYTHON_CLIENT_PREALLOCATE", "warning"),
        (
            {"XLA_PYTHON_CLIENT_MEM_FRACTION": "2"},
            ("jax",),
            "XLA_PYTHON_CLIENT_MEM_FRACTION",
            "error",
        ),
        ({}, ("tensorflow",), "TF_FORCE_GPU_ALLOW_GROWTH", "warning"),
        (
            {"TF_FORCE_GPU_ALLOW_GROWTH": "yes"},
            ("tensorflow",),
            "TF_FORCE_GPU_ALLOW_GROWTH",
            "error",
        ),
        ({"CUDA_VISIBLE_DEVICES": "1"}, (), "CUDA_VISIBLE_DEVICES", "info"),
    ],
)
def test_each_setting_gets_its_advice(
    env: dict[str, str], packages: tuple[str, ...], setting: str, severity: str
) -> None:
    found = diagnose(env, FakeNvml, _installed(*packages))
    assert _advice(found)[setting] == severity
    assert found.settings.get(setting, env.get(setting)) == env.get(setting)


@pytest.mark.parametrize(
    ("env", "packages"),
    [
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, ("jax",)),
        ({"TF_FORCE_GPU_ALLOW_GROWTH": "true"}, ("tensorflow",)),
        ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, ()),
    ],
)
def test_settings_as_advised_get_no_advice(
    env: dict[str, str], packages: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # a CUDA build (CI's may be a CPU one)
    found = diagnose(env, FakeNvml, _installed(*packages))
    assert set(_advice(found)) <= {"GPU 0 MIG mode", "GPU 0 processes"}


def test_a_torch_built_for_a_newer_cuda_than_the_driver_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    found = diagnose({}, lambda: FakeNvml(cuda=12040), _installed())
    assert found.cuda_driver == "12.4"
    assert _advice(found)["torch built for CUDA 13.0"] == "error"
    monkeypatch.setattr(torch.version, "cuda", None)
    found = diagnose({}, FakeNvml, _installed())
    assert _advice(found)[f"torch {torch.__version__}"] == "warning"  # a CPU build with GPUs


def test_the_command_line_prints_and_exits_by_the_advice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert main(["doctor", "--json"]) in (0, 1)
    found = json.loads(capsys.readouterr().out)
    assert set(found) >= {"driver", "gpus", "frameworks", "settings", "advice"}
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:-3")
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "PYTORCH_CUDA_ALLOC_CONF" in out and "error" in out


class FakePublished:
    """One publisher: pid 4242 (on GPU 0 in FakeNvml), a JAX process that preallocated."""

    def __init__(self, prealloc: str | None = None) -> None:
        self.prealloc = prealloc

    def read(self) -> dict[int, Any]:
        from memfit.monitor import MemoryStats, Published

        row = MemoryStats("jax", "gpu:0", "gpu", 0, None, 2 * GIB, 3 * GIB, 100 * GIB, 100 * GIB)
        env = {"XLA_PYTHON_CLIENT_PREALLOCATE": self.prealloc}
        settings = {"environment": env, "jax": {"started": True}}
        return {4242: Published(4242, None, 0.0, False, None, (), (row,), settings)}


@pytest.fixture(autouse=True)
def _no_real_processes(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Nothing of this machine's own processes: an empty runtime directory, no environments."""
    from memfit.monitor import _doctor_procs

    monkeypatch.setenv("MEMFIT_RUNTIME_DIR", str(tmp_path / "rt"))
    monkeypatch.setattr(_doctor_procs, "read_environ", lambda pid: None)


def test_a_jax_process_holding_its_gpu_unused_is_named_with_the_fix() -> None:
    found = diagnose({}, FakeNvml, _installed("jax"), published=FakePublished())
    (proc,) = found.processes
    assert (proc.pid, proc.gpus, proc.source, proc.started) == (4242, [0], "published", ["jax"])
    (advice,) = [a for a in found.advice if a.setting.startswith("pid 4242")]
    assert advice.severity == "warning"
    assert advice.setting == "pid 4242 (jax, GPU 0)"
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in advice.change
    assert "holds 100.00 GiB of the GPU and uses 2.00 GiB (peak 3.00 GiB)" in advice.reason
    grown = diagnose({}, FakeNvml, _installed("jax"), published=FakePublished("false"))
    (advice,) = [a for a in grown.advice if a.setting.startswith("pid 4242")]
    assert "memfit run --limit" in advice.change  # it grew there: a limit is the fix


def test_a_process_that_does_not_publish_shows_its_environment(capsys) -> None:
    from rich.console import Console

    from memfit.report import render_doctor

    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    found = diagnose({}, FakeNvml, _installed(), environ_of={4242: env}.get)
    (proc,) = found.processes
    assert (proc.pid, proc.source, proc.environment, proc.stats) == (
        4242,
        "environment",
        env,
        [],
    )
    console = Console(record=True, width=200, color_system=None)
    render_doctor(found, console)
    text = console.export_text()
    assert "running processes' memory settings" in text
    assert "TF_FORCE_GPU_ALLOW_GROWTH=true" in text


def test_read_environ_keeps_only_the_memory_variables(tmp_path: Any) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "environ").write_bytes(
        b"HOME=/root\0XLA_PYTHON_CLIENT_PREALLOCATE=false\0PYTORCH_CUDA_ALLOC_CONF=a:b=c\0"
    )
    assert read_environ(7, str(tmp_path)) == {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "PYTORCH_CUDA_ALLOC_CONF": "a:b=c",
    }
    assert read_environ(8, str(tmp_path)) is None
