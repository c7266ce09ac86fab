"""``memfit doctor``: what this machine's GPUs, frameworks and memory settings are, and what to
change.

It reads without starting anything: NVML for the driver, the GPUs, MIG and the processes on
each GPU; package metadata for TensorFlow and JAX (importing them could start their runtimes);
torch, already imported by memfit, for its CUDA build; and the environment for the allocator
settings each framework reads when it starts (``PYTORCH_CUDA_ALLOC_CONF``,
``TF_FORCE_GPU_ALLOW_GROWTH``, ``XLA_PYTHON_CLIENT_PREALLOCATE``...). Each piece of advice names
the setting, the change and the reason. Where NVML cannot answer (no driver, no GPU), the GPU
part says why and the rest still runs.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from memfit._errors import InvalidInputError, MemfitError
from memfit.allocator import AllocatorConfig
from memfit.monitor._advice import Advice
from memfit.monitor._doctor_procs import ProcessSettings, process_advice, process_settings
from memfit.monitor._framework_numbers import ENV_NAMES
from memfit.monitor._frameworks import JAX_FRACTIONS
from memfit.monitor._nvml import NvmlBackend, NvmlCallError, PynvmlBackend
from memfit.monitor._procs import LinuxProcs
from memfit.monitor._published import PublishedSource, RuntimeDir
from memfit.monitor._publisher import runtime_dir

__all__ = ["SETTINGS", "Advice", "Diagnosis", "FrameworkInfo", "GpuInfo", "diagnose"]

# the environment variables each framework reads for its GPU memory, when its runtime starts
SETTINGS = ENV_NAMES


@dataclass(frozen=True)
class FrameworkInfo:
    """One framework as installed: its version (None: not installed) and CUDA build."""

    name: str
    version: str | None
    cuda: str | None  # the CUDA it was built for ("13.0"), "none" for a CPU build, None unknown


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML sees it. Sizes are int bytes."""

    index: int
    name: str
    total: int
    used: int
    mig: bool | None  # MIG mode on; None where the GPU cannot tell
    processes: list[tuple[int, int | None]]  # (pid, used bytes or None)


@dataclass(frozen=True)
class Diagnosis:
    """What ``memfit doctor`` found."""

    python: str
    driver: str | None
    cuda_driver: str | None  # the CUDA version the driver supports ("13.0")
    nvml_error: str | None  # why there are no GPUs below, where NVML could not answer
    gpus: list[GpuInfo]
    frameworks: list[FrameworkInfo]
    settings: dict[str, str | None]
    processes: list[ProcessSettings] = field(default_factory=list)
    advice: list[Advice] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "units": "bytes"}


def diagnose(
    environ: Mapping[str, str] | None = None,
    open_nvml: Callable[[], NvmlBackend] = PynvmlBackend,
    installed: Callable[[str], str | None] | None = None,
    published: PublishedSource | None = None,
    environ_of: Callable[[int], dict[str, str] | None] | None = None,
) -> Diagnosis:
    """The machine as it is now, and what to change. The rest are for tests: the NVML
    backend, a package's installed version, where processes publish their settings, and how
    a process's environment is read (``/proc/PID/environ``)."""
    env = dict(os.environ if environ is None else environ)
    version_of = installed or _installed
    driver = cuda_driver = error = None
    gpus: list[GpuInfo] = []
    try:
        nvml = open_nvml()
    except MemfitError as exc:
        error = str(exc)
    else:
        try:
            driver = nvml.driver_version()
            cuda_driver = _cuda_driver(nvml)
            gpus = [_gpu(nvml, i) for i in range(nvml.device_count())]
        finally:
            nvml.close()
    frameworks = _frameworks(version_of)
    settings = {name: env.get(name) for name in SETTINGS}
    source = published if published is not None else RuntimeDir(runtime_dir(), LinuxProcs())
    on_gpus = [(gpu.index, pid) for gpu in gpus for pid, _ in gpu.processes]
    processes = process_settings(on_gpus, source.read(), environ_of)
    found = Diagnosis(
        python=platform.python_version(),
        driver=driver,
        cuda_driver=cuda_driver,
        nvml_error=error,
        gpus=gpus,
        frameworks=frameworks,
        settings=settings,
        processes=processes,
    )
    found.advice.extend(advise(found))
    return found


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cuda_driver(nvml: NvmlBackend) -> str | None:
    """``nvmlSystemGetCudaDriverVersion`` as "13.0", where the backend can ask it."""
    ask = getattr(nvml, "cuda_driver_version", None)
    if ask is None:
        return None
    try:
        number = int(ask())
    except (NvmlCallError, ValueError, TypeError):
        return None
    return f"{number // 1000}.{number % 1000 // 10}"


def _gpu(nvml: NvmlBackend, index: int) -> GpuInfo:
    memory = nvml.memory(index, 1)
    processes: list[tuple[int, int | None]] = []
    for kind in ("compute", "graphics"):
        with contextlib.suppress(NvmlCallError):
            processes += nvml.processes(index, kind)  # type: ignore[arg-type]
    mig_mode = getattr(nvml, "mig_mode", None)
    mig: bool | None = None
    if mig_mode is not None:
        try:
            mig = bool(mig_mode(index))
        except NvmlCallError:
            mig = None
    return GpuInfo(index, nvml.name(index), memory.total, memory.used, mig, processes)


def _frameworks(version_of: Callable[[str], str | None]) -> list[FrameworkInfo]:
    import torch

    tf = version_of("tensorflow") or version_of("tensorflow-cpu")
    tf_cuda = None if tf is None else ("none" if version_of("tensorflow-cpu") else None)
    jax = version_of("jax")
    plugins = [p for p in ("jax-cuda13-plugin", "jax-cuda12-plugin") if version_of(p)]
    jax_cuda = None if jax is None else (plugins[0].split("-")[1][4:] if plugins else "none")
    return [
        FrameworkInfo("torch", torch.__version__, torch.version.cuda or "none"),
        FrameworkInfo("tensorflow", tf, tf_cuda),
        FrameworkInfo("jax", jax, jax_cuda),
    ]


def advise(found: Diagnosis) -> list[Advice]:
    """What to change on this machine, most serious first."""
    advice = [
        *_torch_advice(found),
        *_tensorflow_advice(found),
        *_jax_advice(found),
        *_gpu_advice(found),
        *process_advice(found.processes),
    ]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(advice, key=lambda a: order[a.severity])


def _torch_advice(found: Diagnosis) -> list[Advice]:
    out = []
    s = found.settings
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        text = s.get(name)
        if text:
            try:
                AllocatorConfig.parse(text)
            except InvalidInputError as exc:
                out.append(Advice("error", f"{name}={text}", "fix or unset it", str(exc)))
    if s.get("PYTORCH_NO_CUDA_MEMORY_CACHING") not in (None, "", "0"):
        out.append(
            Advice(
                "warning",
                "PYTORCH_NO_CUDA_MEMORY_CACHING",
                "unset it outside debugging",
                "PyTorch's caching allocator is off: every free goes back to the driver "
                "(slow), and memfit's estimates assume the cache",
            )
        )
    torch = next(f for f in found.frameworks if f.name == "torch")
    if found.gpus and torch.cuda == "none":
        out.append(
            Advice(
                "warning",
                f"torch {torch.version}",
                "install a CUDA build of torch (pip's default on Linux)",
                "this torch is a CPU build: it cannot use the GPUs NVML sees",
            )
        )
    if (
        torch.cuda not in (None, "none")
        and found.cuda_driver is not None
        and _version(torch.cuda) > _version(found.cuda_driver)
    ):
        out.append(
            Advice(
                "error",
                f"torch built for CUDA {torch.cuda}",
                f"update the driver to one for CUDA {torch.cuda}, or install a torch built "
                f"for CUDA {found.cuda_driver} or older",
                f"the driver supports CUDA up to {found.cuda_driver}: torch cannot start CUDA "
                "with it",
            )
        )
    return out


def _tensorflow_advice(found: Diagnosis) -> list[Advice]:
    growth = found.settings.get("TF_FORCE_GPU_ALLOW_GROWTH")
    if growth is not None and growth.lower() not in ("true", "false"):
        return [
            Advice(
                "error",
                f"TF_FORCE_GPU_ALLOW_GROWTH={growth}",
                "set it to true (or false)",
                "TensorFlow reads only 'true' or 'false' here; anything else stops its GPU "
                "runtime from starting",
            )
        ]
    tf = next(f for f in found.frameworks if f.name == "tensorflow")
    if tf.version is not None and found.gpus and (growth or "").lower() != "true":
        return [
            Advice(
                "warning",
                "TF_FORCE_GPU_ALLOW_GROWTH",
                "set TF_FORCE_GPU_ALLOW_GROWTH=true before TensorFlow uses a GPU (memfit run "
                "--growth, or memfit.configure(growth=True) at the top of the script)",
                "TensorFlow maps nearly all of each GPU's memory when it starts, whatever it "
                "uses: other processes on the GPU run out",
            )
        ]
    return []


def _jax_advice(found: Diagnosis) -> list[Advice]:
    s = found.settings
    out = []
    given = [n for n in JAX_FRACTIONS if s.get(n) is not None]
    if len(given) == 2:
        out.append(
            Advice(
                "error",
                " and ".join(given),
                f"unset {JAX_FRACTIONS[1]} (the older name)",
                "JAX refuses to start its GPU backend when both are set",
            )
        )
    fraction = s.get(given[0]) if given else None
    if fraction is not None:
        try:
            ok = 0 < float(fraction) <= 1
        except ValueError:
            ok = False
        if not ok:
            out.append(
                Advice(
                    "error",
                    f"{given[0]}={fraction}",
                    "give a share of the GPU between 0 and 1, e.g. .5",
                    "JAX reads it as the share of each GPU it takes",
                )
            )
    jax = next(f for f in found.frameworks if f.name == "jax")
    preallocate = (s.get("XLA_PYTHON_CLIENT_PREALLOCATE") or "true").lower()
    if jax.version is not None and found.gpus and preallocate != "false":
        share = fraction if fraction is not None and not out else "0.75"
        out.append(
            Advice(
                "warning",
                "XLA_PYTHON_CLIENT_PREALLOCATE",
                "set XLA_PYTHON_CLIENT_PREALLOCATE=false before JAX is imported (memfit run "
                "--growth, or memfit.configure(growth=True) at the top of the script; or a "
                "memory fraction for the share it needs)",
                f"JAX takes {share} of each GPU's memory at its first GPU use, whatever it "
                "uses: nvidia-smi shows it all as used, and other processes run out",
            )
        )
    return out


def _gpu_advice(found: Diagnosis) -> list[Advice]:
    if found.nvml_error is not None:
        return [
            Advice(
                "info",
                "GPUs",
                "none needed for memfit estimate and plan",
                f"NVML could not answer: {found.nvml_error.split('. ')[0].rstrip('.')}; memfit "
                "validate, watch and export need a GPU",
            )
        ]
    out = []
    visible = found.settings.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        out.append(
            Advice(
                "info",
                f"CUDA_VISIBLE_DEVICES={visible}",
                "none, if meant",
                "the frameworks see only these GPUs, renumbered from 0; NVML and nvidia-smi "
                "list them all",
            )
        )
    for gpu in found.gpus:
        if gpu.mig:
            out.append(
                Advice(
                    "info",
                    f"GPU {gpu.index} MIG mode",
                    "give a MIG instance's size as memfit's --gpu",
                    "a process sees one MIG instance's memory, not the GPU's",
                )
            )
        held = sum(used or 0 for _, used in gpu.processes)
        if gpu.processes:
            out.append(
                Advice(
                    "info",
                    f"GPU {gpu.index} processes",
                    "keep it in mind, or use another GPU",
                    f"{len(gpu.processes)} process(es) hold {held / 2**30:.2f} GiB of it "
                    f"already: a job there has {(gpu.total - gpu.used) / 2**30:.2f} GiB free",
                )
            )
    return out


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())
