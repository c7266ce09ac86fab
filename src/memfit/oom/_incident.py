"""The facts the observer saved about one out-of-memory error, read back from its JSON file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memfit._errors import InvalidInputError
from memfit.allocator import AllocatorConfig

__all__ = ["Frame", "Incident", "ModelFacts", "read_incident"]


@dataclass(frozen=True, slots=True)
class Frame:
    """A Python stack frame."""

    filename: str
    line: int
    name: str

    def text(self) -> str:
        return f"{self.filename}:{self.line} in {self.name}"


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """The modules and optimizer found in the failing program's frames, bytes on the device."""

    name: str | None
    parameters: int
    parameter_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int
    dtypes: dict[str, int]
    optimizer: str | None
    optimizer_foreach: bool | None
    optimizer_fused: bool | None
    checkpointing: bool
    huggingface: bool

    @property
    def persistent(self) -> int:
        """Parameters, gradients and optimizer state: what stays between steps."""
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_state_bytes

    @property
    def fp32_bytes(self) -> int:
        return self.dtypes.get("float32", 0)


@dataclass(frozen=True)
class Incident:
    """One out-of-memory error. Sizes in bytes; ``None`` where the observer could not tell."""

    path: Path  # the JSON file
    raw: dict[str, Any]
    pid: int | None
    time: str
    argv: tuple[str, ...]
    host: str | None
    torch_version: str | None
    device_index: int
    device_name: str | None
    device_total: int | None
    alloc_size: int
    block_size: int | None
    limit: int
    fraction_limited: bool
    device_free: int
    available: int
    shortfall: int
    phase: str
    thread: str
    in_main_thread: bool
    stack: tuple[Frame, ...]  # innermost first
    main_stack: tuple[Frame, ...] | None
    recorded_frames: tuple[Frame, ...] | None
    grad_enabled: bool | None
    autocast: bool | None
    allocated: int | None
    reserved: int | None
    largest_free: int | None
    segments: int | None
    nvml_process: int | None
    nvml_note: str | None
    model: ModelFacts | None
    distributed: dict[str, Any] | None  # rank, world_size, local_rank, backend
    history_recorded: bool
    history_entries: int
    expandable: bool
    alloc_conf: str | None
    snapshot_path: Path | None
    errors: tuple[str, ...]

    @property
    def stem(self) -> str:
        return self.path.name.removesuffix(".json")

    @property
    def fragmentation(self) -> int | None:
        """Reserved but unallocated: free memory held in PyTorch's partly used segments."""
        if self.reserved is None or self.allocated is None:
            return None
        return max(self.reserved - self.allocated, 0)

    @property
    def non_pytorch(self) -> int | None:
        """This process's memory outside the caching allocator (NVML minus reserved)."""
        if self.nvml_process is None or self.reserved is None:
            return None
        return max(self.nvml_process - self.reserved, 0)

    @property
    def activations(self) -> int | None:
        """Allocated minus parameters, gradients and optimizer state: the step's working set."""
        if self.model is None or self.allocated is None:
            return None
        return max(self.allocated - self.model.persistent, 0)


def _section(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _int(d: dict[str, Any], key: str) -> int | None:
    value = d.get(key)
    return value if type(value) is int else None


def _bool(d: dict[str, Any], key: str) -> bool | None:
    value = d.get(key)
    return value if isinstance(value, bool) else None


def _frames(raw: Any) -> tuple[Frame, ...] | None:
    if not isinstance(raw, list):
        return None
    return tuple(
        Frame(str(f.get("filename", "?")), int(f.get("line") or 0), str(f.get("name", "?")))
        for f in raw
        if isinstance(f, dict)
    )


def _model(raw: Any) -> ModelFacts | None:
    if not isinstance(raw, dict):
        return None
    dtypes = raw.get("dtypes")
    return ModelFacts(
        name=raw.get("name") if isinstance(raw.get("name"), str) else None,
        parameters=_int(raw, "parameters") or 0,
        parameter_bytes=_int(raw, "parameter_bytes") or 0,
        gradient_bytes=_int(raw, "gradient_bytes") or 0,
        optimizer_state_bytes=_int(raw, "optimizer_state_bytes") or 0,
        dtypes={str(k): int(v) for k, v in dtypes.items()} if isinstance(dtypes, dict) else {},
        optimizer=raw.get("optimizer") if isinstance(raw.get("optimizer"), str) else None,
        optimizer_foreach=_bool(raw, "optimizer_foreach"),
        optimizer_fused=_bool(raw, "optimizer_fused"),
        checkpointing=raw.get("checkpointing") is True,
        huggingface=raw.get("huggingface") is True,
    )


def _expandable(raw: dict[str, Any]) -> bool:
    settings = raw.get("allocator_settings")
    if isinstance(settings, dict) and isinstance(settings.get("expandable_segments"), bool):
        return bool(settings["expandable_segments"])
    conf = raw.get("alloc_conf") or ""
    if not isinstance(conf, str):
        return False
    try:
        return AllocatorConfig.parse(conf).expandable_segments
    except InvalidInputError:
        # text this process's torch took but memfit's stricter parser refuses: read the key
        return "expandable_segments:true" in conf.replace(" ", "").lower()


def read_incident(path: str | os.PathLike[str]) -> Incident:
    """Read an incident file written by the observer (``oom-....json``)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(
            f"The out-of-memory facts file '{path}' cannot be read: {exc.strerror or exc}."
        ) from None
    except ValueError:
        raise InvalidInputError(
            f"'{path}' is not a JSON file written by memfit's out-of-memory observer (it is "
            "empty or cut short, perhaps because the process was killed while writing it)."
        ) from None
    if not isinstance(raw, dict) or not str(raw.get("schema", "")).startswith("memfit.oom/"):
        raise InvalidInputError(
            f"'{path}' is JSON but not an out-of-memory facts file written by memfit (no "
            "'schema': 'memfit.oom/1')."
        )
    failure = _section(raw, "failure")
    memory = _section(raw, "memory")
    device = _section(raw, "device")
    history = _section(raw, "history")
    files = _section(raw, "files")
    snapshot = files.get("snapshot")
    alloc = _int(failure, "alloc_size") or 0
    return Incident(
        path=path,
        raw=raw,
        pid=_int(raw, "pid"),
        time=str(raw.get("time", "")),
        argv=tuple(str(a) for a in raw.get("argv") or ()),
        host=raw.get("host") if isinstance(raw.get("host"), str) else None,
        torch_version=raw.get("torch") if isinstance(raw.get("torch"), str) else None,
        device_index=_int(device, "index") or 0,
        device_name=device.get("name") if isinstance(device.get("name"), str) else None,
        device_total=_int(device, "total"),
        alloc_size=alloc,
        block_size=_int(failure, "block_size"),
        limit=_int(failure, "limit") or 0,
        fraction_limited=failure.get("fraction_limited") is True,
        device_free=_int(failure, "device_free") or 0,
        available=_int(failure, "available") or 0,
        shortfall=_int(failure, "shortfall") or 0,
        phase=str(failure.get("phase") or "other"),
        thread=str(failure.get("thread") or "?"),
        in_main_thread=failure.get("in_main_thread") is not False,
        stack=_frames(failure.get("stack")) or (),
        main_stack=_frames(failure.get("main_stack")),
        recorded_frames=_frames(failure.get("recorded_frames")),
        grad_enabled=_bool(failure, "grad_enabled"),
        autocast=_bool(failure, "autocast"),
        allocated=_int(memory, "allocated"),
        reserved=_int(memory, "reserved"),
        largest_free=_int(memory, "largest_free_block"),
        segments=_int(memory, "segments"),
        nvml_process=_int(memory, "nvml_process"),
        nvml_note=memory.get("nvml_note") if isinstance(memory.get("nvml_note"), str) else None,
        model=_model(raw.get("model")),
        distributed=raw.get("distributed") if isinstance(raw.get("distributed"), dict) else None,
        history_recorded=history.get("recorded") is True,
        history_entries=_int(history, "entries") or 0,
        expandable=_expandable(raw),
        alloc_conf=raw.get("alloc_conf") if isinstance(raw.get("alloc_conf"), str) else None,
        snapshot_path=path.parent / snapshot if isinstance(snapshot, str) else None,
        errors=tuple(str(e) for e in raw.get("errors") or ()),
    )
