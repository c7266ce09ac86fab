"""Test data for the snapshot tests: the real H200 traces, and synthetic traces."""

from __future__ import annotations

import gzip
import pickle
import random
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from memfit._events import MemoryEvent
from memfit.snapshot._record import synthetic_snapshot

TRACES = (
    Path(__file__).resolve().parents[2]
    / "benchmarks"
    / "results"
    / "2026-11-30-h200-estimate-accuracy"
    / "traces"
)
ALL_TRACES = sorted(TRACES.glob("*.pickle.gz"))
MiB = 1 << 20

# a few real traces that cover the cases: default settings, expandable segments, an
# empty_cache right before a new segment, many segments freed at once, a tiny one
SOME_TRACES = [
    TRACES / f"trace-{name}.pickle.gz"
    for name in (
        "bert-base-fp32-b32-s512",
        "roberta-base-fp32-b32-s512-expandable",
        "resnet50-fp16-infer-b128",
        "llama-2-7b-bf16-infer-b8-s2048",
        "lstm-lm-fp32-b64-s256",
    )
]


def raw_trace(path: Path) -> dict[str, Any]:
    """The snapshot as plain pickle reads it (these files are ours, so that is safe here)."""
    with gzip.open(path, "rb") as fh:
        data: dict[str, Any] = pickle.load(fh)
    return data


FRAMES = {
    "linear": {"filename": "/x/site-packages/torch/nn/functional.py", "line": 10, "name": "linear"},
    "call": {
        "filename": "/x/site-packages/torch/nn/modules/module.py",
        "line": 1,
        "name": "_call_impl",
    },
    "attn": {"filename": "/home/u/model.py", "line": 42, "name": "Attention.forward"},
    "mlp": {"filename": "/home/u/model.py", "line": 77, "name": "MLP.forward"},
    "main": {"filename": "/home/u/train.py", "line": 7, "name": "main"},
}
STACKS = [
    [FRAMES["linear"], FRAMES["attn"], FRAMES["call"], FRAMES["main"]],
    [FRAMES["linear"], FRAMES["mlp"], FRAMES["call"], FRAMES["main"]],
]


def fragmenting_events(n: int = 4000, seed: int = 0) -> list[MemoryEvent]:
    """Allocations of ever-changing sizes, freed in random order: leaves holes in segments."""
    rng = random.Random(seed)
    events: list[MemoryEvent] = []
    live: list[int] = []
    for block in range(n):
        if live and (rng.random() < 0.45 or len(live) > 60):
            events.append(MemoryEvent("free", live.pop(rng.randrange(len(live))), 0))
        else:
            size = rng.choice(
                [
                    rng.randint(1, MiB),
                    rng.randint(2 * MiB, 9 * MiB),
                    rng.randint(11 * MiB, 300 * MiB),
                ]
            )
            events.append(MemoryEvent("alloc", block, size, 0, block % 2))
            live.append(block)
    return events


VOID = {"meta", "br", "img", "input", "link", "hr", "circle", "line", "polyline", "rect"}


class _Balance(HTMLParser):
    """Checks that every element is closed in order; collects src/href and tag names."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.tags: set[str] = set()
        self.links: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href")]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href", "xlink:href")]

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()


def check_html(text: str) -> _Balance:
    parser = _Balance()
    parser.feed(text)
    parser.close()
    assert parser.errors == [] and parser.stack == []
    assert "script" not in parser.tags and "iframe" not in parser.tags
    assert not [link for link in parser.links if re.match(r"(https?:)?//", link)]
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text)
    assert "@import" not in text and "url(" not in text
    return parser


@pytest.fixture
def write_snapshot(tmp_path: Path) -> Callable[..., Path]:
    """Write a synthetic snapshot of ``events`` (default: a fragmenting trace) to a file."""

    def write(
        events: list[MemoryEvent] | None = None,
        config: str = "",
        name: str = "snap.pickle",
        **kwargs: Any,
    ) -> Path:
        data = synthetic_snapshot(
            events if events is not None else fragmenting_events(), config, **kwargs
        )
        path = tmp_path / name
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "wb") as fh:
            pickle.dump(data, fh)
        return path

    return write
