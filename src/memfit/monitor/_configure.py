"""``memfit.configure(...)``: one call for the GPU memory settings of torch, TensorFlow and JAX.

The settings are checked here (sizes, fractions, conflicts, names) and the GPU's size read from
NVML where a framework needs it (JAX takes a share of the GPU, TensorFlow a size); the knobs
are turned by :mod:`memfit.monitor._frameworks`, which ``memfit run`` also copies into its
child. What a framework cannot do, or can no longer do because its runtime has started, is
said: in the returned :class:`Configuration`, as a :class:`ConfigurationWarning`, or (with
``strict=True``) as an error.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from memfit._errors import InvalidInputError, MemfitError
from memfit._units import format_bytes, parse_size, split_size
from memfit.monitor import _framework_numbers, _frameworks
from memfit.monitor._nvml import NvmlBackend, PynvmlBackend

__all__ = [
    "ALLOCATORS",
    "Configuration",
    "ConfigurationTooLateError",
    "ConfigurationWarning",
    "SettingAction",
    "configure",
    "resolve_frameworks",
]

Status = Literal["set", "applied", "pending", "already", "too late", "unsupported"]
ALLOCATORS = ("default", "async", "expandable", "platform")
_ALLOCATOR_ALIASES = {
    "native": "default",
    "caching": "default",
    "bfc": "default",
    "cudamallocasync": "async",
    "cuda_malloc_async": "async",
    "cuda_async": "async",
    "expandable_segments": "expandable",
    "none": "platform",
    "no-cache": "platform",
}
_FRAMEWORK_ALIASES = {"pytorch": "torch", "tf": "tensorflow"}


class ConfigurationWarning(UserWarning):
    """A memory setting that a framework cannot take, or can no longer take."""


class ConfigurationTooLateError(MemfitError):
    """``strict=True``: a framework's runtime started before its settings could be set."""


@dataclass(frozen=True, slots=True)
class SettingAction:
    """What was done for one setting of one framework.

    ``status``: ``set`` (an environment variable, read when the runtime starts), ``applied``
    (a runtime call made now), ``pending`` (made when the framework is imported or CUDA
    starts), ``already`` (the framework does it anyway), ``too late`` (its runtime started and
    will not read it), ``unsupported`` (the framework has no such knob). ``what`` names the
    knob; ``why`` says more (``"was X"``: the value it replaced).
    """

    framework: str
    setting: str
    status: Status
    what: str
    why: str


@dataclass(frozen=True)
class Configuration:
    """What :func:`configure` did, per framework and setting."""

    settings: dict[str, Any]
    frameworks: tuple[str, ...]
    actions: tuple[SettingAction, ...]
    gpu_total: int | None  # the smallest visible GPU's size, where NVML told it

    @property
    def problems(self) -> list[SettingAction]:
        """The settings not in effect: too late, or unsupported by a framework."""
        return [a for a in self.actions if a.status in ("too late", "unsupported")]

    def environment(self) -> dict[str, str]:
        """The variables this configuration set (``NAME=value`` actions), by name."""
        out = {}
        for a in self.actions:
            name, eq, value = a.what.partition("=")
            if eq and a.status == "set" and " " not in name:
                out[name] = value
        return out

    def lines(self) -> list[str]:
        """One line per action, for a terminal."""
        out = []
        for a in self.actions:
            why = f" ({a.why})" if a.why else ""
            out.append(f"{a.framework:<10} {a.setting:<9} {a.status:<11} {a.what}{why}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "frameworks": list(self.frameworks),
            "gpu_total": self.gpu_total,
            "actions": [asdict(a) for a in self.actions],
            "units": "bytes",
        }


def configure(
    *,
    growth: bool | None = None,
    limit: int | float | str | None = None,
    preallocate: bool | None = None,
    allocator: str | None = None,
    framework: str | Iterable[str] = "auto",
    strict: bool = False,
    environ: MutableMapping[str, str] | None = None,
    open_nvml: Callable[[], NvmlBackend] = PynvmlBackend,
) -> Configuration:
    """Set the GPU memory settings of torch, TensorFlow and JAX, before they start.

    - ``growth``: take memory as it is needed (``True``: TensorFlow's memory growth, JAX
      without preallocation) or map the pool up front (``False``). PyTorch always grows.
    - ``limit``: the most the process may take on each GPU: a size (``"8GiB"``, bytes as an
      ``int``) or a share of the GPU (``0.5``, ``"50%"``). torch: its per-process memory
      fraction; TensorFlow: a logical device of that size; JAX: its memory fraction.
    - ``preallocate``: the opposite of ``growth`` (``True``: map ``limit``, or the framework's
      default share, at start); giving both is allowed only when they agree.
    - ``allocator``: ``"async"`` (cudaMallocAsync), ``"expandable"`` (torch's expandable
      segments), ``"platform"`` (no caching: slow, for debugging), ``"default"`` (undo).
    - ``framework``: ``"auto"`` (every one installed), ``"all"``, a name or several.

    Settings are read by a framework when its runtime starts; after that this says "too late"
    (a :class:`ConfigurationWarning`, or :class:`ConfigurationTooLateError` with ``strict``).
    A setting a named framework does not have is an error; under ``"auto"``, a warning.
    ``environ``: plan for another process's environment, given as this mapping (what
    ``memfit run`` does for its child), importing and hooking nothing here.
    """
    frameworks = resolve_frameworks(framework)
    named = framework not in ("auto", "all")
    totals: list[int] | None = None
    if limit is not None:
        totals = _gpu_totals(open_nvml)
    gpu_total = min(totals) if totals else None
    settings = _settings(growth, limit, preallocate, allocator, gpu_total)
    env = os.environ if environ is None else environ
    in_process = environ is None
    # a dry run on a copy first: nothing is changed when the call is refused
    started = _framework_numbers.started
    dry = _frameworks.configure(
        settings, frameworks, dict(env), started=started, in_process=in_process, dry=True
    )
    _refuse_unsupported(dry, named)
    if strict:
        _refuse_late(dry)
    actions = _frameworks.configure(
        settings, frameworks, env, started=started, in_process=in_process
    )
    found = Configuration(
        settings=settings,
        frameworks=tuple(frameworks),
        actions=tuple(SettingAction(**a) for a in actions),
        gpu_total=gpu_total,
    )
    for problem in found.problems:
        warnings.warn(
            f"memfit.configure: {problem.framework} {problem.setting} is not in effect "
            f"({problem.status}): {problem.why}",
            ConfigurationWarning,
            stacklevel=2,
        )
    return found


def resolve_frameworks(framework: str | Iterable[str]) -> list[str]:
    """The frameworks meant: ``"auto"`` is every one installed (torch always), ``"all"`` all
    three (for another Python's process)."""
    if framework == "all":
        return list(_framework_numbers.FRAMEWORKS)
    if framework == "auto":
        return [f for f in _framework_numbers.FRAMEWORKS if f == "torch" or _installed(f)]
    names = [framework] if isinstance(framework, str) else list(framework)
    out = []
    for name in names:
        key = _FRAMEWORK_ALIASES.get(str(name).lower(), str(name).lower())
        if key not in _framework_numbers.FRAMEWORKS:
            raise InvalidInputError(
                f"framework={name!r} is not one memfit configures: give 'auto', 'all', 'torch', "
                "'tensorflow' or 'jax' (or a list of them)."
            )
        if key not in out:
            out.append(key)
    if not out:
        raise InvalidInputError("framework=[] names no framework: give 'auto' or a name.")
    return out


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _settings(
    growth: bool | None,
    limit: int | float | str | None,
    preallocate: bool | None,
    allocator: str | None,
    gpu_total: int | None,
) -> dict[str, Any]:
    for name, value in (("growth", growth), ("preallocate", preallocate)):
        if value is not None and not isinstance(value, bool):
            raise InvalidInputError(f"{name}={value!r} is not accepted; give True or False.")
    if growth is not None and preallocate is not None and growth == preallocate:
        raise InvalidInputError(
            f"growth={growth} with preallocate={preallocate} contradict each other: growing "
            "takes memory as needed, preallocating maps it up front. Give one of them."
        )
    if growth is None and preallocate is not None:
        growth = not preallocate
    out: dict[str, Any] = {"growth": growth, "allocator": _allocator(allocator)}
    out.update(_limit(limit, gpu_total))
    if all(v is None for v in out.values()):
        raise InvalidInputError(
            "memfit.configure() was given no setting: give growth, limit, preallocate or allocator."
        )
    return out


def _allocator(allocator: str | None) -> str | None:
    if allocator is None:
        return None
    key = str(allocator).lower()
    key = _ALLOCATOR_ALIASES.get(key, key)
    if key not in ALLOCATORS:
        raise InvalidInputError(
            f"allocator={allocator!r} is not one memfit knows: give 'async' (cudaMallocAsync), "
            "'expandable' (torch's expandable segments), 'platform' (no caching) or "
            "'default'."
        )
    return key


def _limit(limit: int | float | str | None, gpu_total: int | None) -> dict[str, Any]:
    """``limit`` as bytes and as a share of the smallest GPU, each where it can be known."""
    if limit is None:
        return {"limit_bytes": None, "limit_fraction": None, "limit_given": None}
    fraction: float | None = None
    size: int | None = None
    if isinstance(limit, float) or (isinstance(limit, str) and limit.strip().endswith("%")):
        text = str(limit).strip()
        try:
            fraction = float(text[:-1]) / 100 if text.endswith("%") else float(text)
        except ValueError:
            fraction = -1.0
        if not 0 < fraction <= 1:
            raise InvalidInputError(
                f"limit={limit!r} is not a share of the GPU: give a fraction above 0 and at "
                "most 1 (0.5, '50%'), or a size with a unit ('8GiB')."
            )
    else:
        if isinstance(limit, str) and limit.strip().startswith("-"):
            raise InvalidInputError(f"limit={limit!r} is below zero: give a size above 0.")
        parts = split_size(limit) if isinstance(limit, str) else None
        if parts is not None and not parts.unit:  # '8', '1e9': bytes is never what was meant
            raise InvalidInputError(
                f"limit={limit!r} has no unit, and memfit does not guess one: give a size such "
                f"as '{str(limit).strip()}GiB', or a share of the GPU such as 0.5."
            )
        size = parse_size(limit)  # refuses negative ints and malformed text
        if size <= 0:
            raise InvalidInputError(f"limit={limit!r} is no memory: give a size above 0.")
    given = "bytes" if size is not None else "share"
    if size is not None and gpu_total is not None:
        if size > gpu_total:
            raise InvalidInputError(
                f"limit={limit!r} ({format_bytes(size)}) is larger than the GPU "
                f"({format_bytes(gpu_total)}): give a smaller size, or a share such as 0.9."
            )
        fraction = size / gpu_total
    elif fraction is not None and gpu_total is not None:
        size = int(fraction * gpu_total)
    return {"limit_bytes": size, "limit_fraction": fraction, "limit_given": given}


def _gpu_totals(open_nvml: Callable[[], NvmlBackend]) -> list[int] | None:
    """The sizes of the GPUs this process may see (``CUDA_VISIBLE_DEVICES``), or ``None``
    where NVML cannot tell (no driver, no GPU)."""
    try:
        nvml = open_nvml()
    except MemfitError:
        return None
    try:
        count = nvml.device_count()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        indices = list(range(count))
        if visible is not None:
            wanted = [e.strip() for e in visible.split(",") if e.strip()]
            uuids = {nvml.uuid(i): i for i in indices}
            indices = [
                int(e) if e.isdigit() else uuids[e]
                for e in wanted
                if (e.isdigit() and int(e) < count) or e in uuids
            ]
        return [nvml.memory(i, 1).total for i in indices] or None
    except MemfitError:
        return None
    finally:
        nvml.close()


def _refuse_unsupported(actions: list[dict[str, Any]], named: bool) -> None:
    if not named:
        return
    for a in actions:
        if a["status"] == "unsupported":
            raise InvalidInputError(
                f"{a['framework']} cannot take the setting {a['setting']}: {a['why']}. "
                f"Leave {a['setting']} out, or configure another framework."
            )


def _refuse_late(actions: list[dict[str, Any]]) -> None:
    late = [a for a in actions if a["status"] == "too late"]
    if late:
        names = ", ".join(f"{a['framework']} {a['setting']} ({a['what']})" for a in late)
        raise ConfigurationTooLateError(
            f"Too late for {names}: {late[0]['why']}. Call "
            "memfit.configure before the framework first uses a GPU (at the top of the "
            "script), or use memfit run --limit/--growth, which sets them before the program "
            "starts. Nothing was changed."
        )
