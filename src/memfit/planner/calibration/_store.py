"""Where calibrations live: the ones memfit ships (``memfit/planner/data``), the ones
``memfit calibrate`` measured on this machine (one file per GPU type, in
:func:`calibration_dir`), and a file named by the user. Plain data (the JSON's dicts) here; the
step-time model turns them into a ``Calibration``."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from memfit._data_dirs import data_dir
from memfit._errors import InvalidInputError
from memfit._gpus import _ALIASES, GPU, KNOWN_GPUS

_REQUIRED = ("gpu", "source", "curves", "kernel_floor", "bandwidth", "host")


def calibration_dir() -> Path:
    """``$MEMFIT_CALIBRATION_DIR``, else ``$XDG_DATA_HOME/memfit/calibrations``, else
    ``~/.local/share/memfit/calibrations``."""
    return data_dir("calibrations", "MEMFIT_CALIBRATION_DIR")


def device_key(name: str) -> str:
    """The key of a GPU type from its device name (``NVIDIA H200`` -> ``h200``, ``NVIDIA
    A100-SXM4-80GB`` -> ``a100-80g``): the longest of memfit's GPU names whose every part
    appears in it as a word (``l4`` is not in ``L40S``), else the name made a file name."""
    text = name.lower()
    matches = [
        key
        for key in [*KNOWN_GPUS, *_ALIASES]
        if all(
            re.search(rf"(?<![a-z0-9]){re.escape(part)}(?![0-9])", text) for part in key.split("-")
        )
    ]
    if matches:
        longest = max(matches, key=len)  # a tie keeps memfit's own name before an alias
        return _ALIASES.get(longest, longest)
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "gpu"


def gpu_key(gpu: GPU) -> str | None:
    """The key of a target GPU named by memfit (``h100``), or ``None`` for a size (``24GiB``)."""
    for key, known in KNOWN_GPUS.items():
        if known.name == gpu.name:
            return key
    return None


@functools.cache
def shipped() -> dict[str, dict[str, Any]]:
    """The calibrations memfit ships, by key (read once; callers copy what they change)."""
    out = {}
    for entry in resources.files("memfit.planner").joinpath("data").iterdir():
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text())
            out[data["key"]] = data
    return out


def saved() -> dict[str, dict[str, Any]]:
    """The calibrations ``memfit calibrate`` saved on this machine, by key; a file that is not
    one is passed over (it may be the user's own)."""
    out: dict[str, dict[str, Any]] = {}
    folder = calibration_dir()
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            data = read_calibration(path)
        except InvalidInputError:
            continue
        out[data["key"]] = {**data, "path": str(path)}
    return out


def saved_state(path: str | None = None) -> tuple[object, ...]:
    """What a cached lookup must notice: the folder, its files' names and times, and the
    time of ``path``."""
    folder = calibration_dir()
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    state: list[object] = [str(folder), *((f.name, f.stat().st_mtime_ns) for f in files)]
    if path is not None:
        target = Path(path).expanduser()
        state.append((str(target), target.stat().st_mtime_ns if target.exists() else None))
    return tuple(state)


def read_calibration(path: str | Path) -> dict[str, Any]:
    """A calibration file's data; a clear error when it is missing or not one."""
    target = Path(path).expanduser()
    try:
        data = json.loads(target.read_text())
    except FileNotFoundError:
        raise InvalidInputError(
            f"calibration file {str(path)!r} does not exist: give the file `memfit calibrate "
            "--out FILE` wrote, or leave the calibration out to use the one memfit has."
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(
            f"calibration file {str(path)!r} could not be read as JSON ({exc}): give a file "
            "`memfit calibrate --out FILE` wrote."
        ) from None
    missing = [k for k in _REQUIRED if not isinstance(data, dict) or k not in data]
    if missing:
        raise InvalidInputError(
            f"calibration file {str(path)!r} is not a step-time calibration (it has no "
            f"{', '.join(missing)}): give a file `memfit calibrate --out FILE` wrote."
        )
    data.setdefault("key", device_key(str(data["gpu"])))
    return data  # type: ignore[no-any-return]


def save_calibration(data: dict[str, Any], path: str | Path | None = None) -> Path:
    """Write ``data`` to ``path``, or as this machine's calibration of its GPU type
    (``<calibration_dir>/<key>.json``, replacing an earlier one). Returns where."""
    target = (
        Path(path).expanduser() if path is not None else calibration_dir() / f"{data['key']}.json"
    )
    partial = target.with_name(target.name + ".partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(data, indent=1) + "\n")
        partial.replace(target)  # a reader never sees half a file
    except OSError as exc:
        raise InvalidInputError(
            f"the calibration could not be written to {str(target)!r} ({exc.strerror or exc}): "
            "give --out a file in a folder you can write to, or set MEMFIT_CALIBRATION_DIR."
        ) from None
    return target
