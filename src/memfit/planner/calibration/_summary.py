"""A calibration's headline rates, to set one beside another (``memfit calibrate`` prints this
machine's beside memfit's): raw numbers, units at the edge."""

from __future__ import annotations

from typing import Any

# (name, curve, kind): the fastest point of a curve ("rate", work per second)
_PEAKS = (
    ("matrix products, bfloat16", "mm:bf16", "flops"),
    ("matrix products, float32", "mm:fp32", "flops"),
    ("matrix products, TF32", "mm:tf32", "flops"),
    ("attention forward, bfloat16", "attn:bf16", "flops"),
    ("attention backward, bfloat16", "attn_bwd:bf16", "flops"),
    ("3x3 convolution, bfloat16", "conv:k3:bf16", "flops"),
)


def headline(data: dict[str, Any]) -> list[tuple[str, str, float | None]]:
    """``(what, kind, value)`` rows of a calibration's data: peak rates (``flops``: FLOP/s),
    bandwidth (``bytes``: bytes/s), the smallest kernel and a forward op on the host
    (``seconds``); ``None`` where the calibration has none."""
    curves = data.get("curves", {})
    rows: list[tuple[str, str, float | None]] = []
    for name, key, kind in _PEAKS:
        points = curves.get(key)
        rows.append((name, kind, max(w / t for w, t in points) if points else None))
    rows.append(("memory bandwidth", "bytes", float(data["bandwidth"])))
    pinned = data.get("pinned_seconds_per_byte", {})
    for direction in ("d2h", "h2d"):
        rate = pinned.get(direction)
        rows.append((f"pinned copy, {direction}", "bytes", 1 / rate if rate else None))
    rows.append(("smallest kernel", "seconds", float(data["kernel_floor"])))
    host = data.get("host", {})
    for phase, style in (("forward", ""), ("backward", ""), ("forward", "checkpointed")):
        key = f"{phase}:{style}" if style else phase
        label = f"host, a {phase} op" + (f" ({style})" if style else "")
        rows.append((label, "seconds", host.get(key)))
    return rows
