"""write_estimate_html and write_estimate_svg: one offline file, well formed, all escaped."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from memfit._units import GiB
from memfit.estimator._result import Estimate, Timeline
from memfit.report import estimate_html, write_estimate_html, write_estimate_svg

Factory = Callable[..., Estimate]
_VOID = {"meta", "link", "br", "img", "input", "hr", "col", "source", "wbr", "area", "base"}


class _Checker(HTMLParser):
    """Records tags and attributes, and fails on an end tag that closes nothing open."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.text: list[str] = []
        self.errors: list[str] = []

    def _attrs(self, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in {"src", "href", "xlink:href", "action", "srcset"} and value:
                self.urls.append(value)
            if name == "style" and value and "url(" in value:
                self.urls.append(value)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._attrs(attrs)
        if tag not in _VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._attrs(attrs)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(document: str) -> _Checker:
    checker = _Checker()
    checker.feed(document)
    checker.close()
    return checker


def test_html_is_well_formed_and_self_contained(estimate_factory: Factory, tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    write_estimate_html(estimate_factory(gpu="h100", notes=["a note"]), path)
    document = path.read_text(encoding="utf-8")
    assert document.startswith("<!DOCTYPE html>")
    checker = _parse(document)
    assert checker.errors == []
    assert checker.stack == []
    assert "svg" in checker.tags and "polyline" in checker.tags
    assert checker.urls == []
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*(https?:)?//", document)
    assert "http://" not in document and "https://" not in document
    assert "<script" not in document and "<link" not in document and "@import" not in document
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_html_has_the_report(estimate_factory: Factory) -> None:
    document = estimate_html(estimate_factory(gpu="h100", notes=["AdamW state is fp32."]))
    text = " ".join(_parse(document).text)
    for expected in (
        "At the peak",
        "activation",
        "parameter",
        "gradient",
        "Top modules at the peak",
        "transformer.h.11.mlp.c_fc",
        "aten::addmm",
        "step1.backward",
        "torch.cuda.max_memory_allocated()",
        "torch.cuda.max_memory_reserved()",
        "nvidia-smi",
        "GiB = 2^30 bytes",
        "AdamW state is fp32.",
        "bf16-mixed",
        "124.4M",
    ):
        assert expected in text
    assert "Fits on H100 80GB with 70.4 GiB headroom" in text
    assert 'class="verdict fits"' in document


def test_html_does_not_fit(
    estimate_factory: Factory, timeline_factory: Callable[..., Timeline]
) -> None:
    document = estimate_html(estimate_factory(gpu="4090", timeline=timeline_factory(scale=3 * GiB)))
    assert "Does not fit on RTX 4090 24GB: short by" in document
    assert 'class="verdict short"' in document
    assert "stroke-dasharray" in document  # the capacity line is drawn


def test_html_escapes_everything(estimate_factory: Factory) -> None:
    evil = "blocks.0.<script>alert('x')</script>"
    estimate = estimate_factory(
        model="<b>model</b>",
        modules=[(evil, GiB)],
        notes=["<img src=x onerror=alert(1)>"],
        peak_op="aten::<op>",
        allocator_config='max_split_size_mb:"128"&x',
    )
    document = estimate_html(estimate)
    assert "<script" not in document
    assert "<img" not in document
    assert "<b>model" not in document
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in document
    assert "&lt;img src=x onerror=alert(1)&gt;" in document
    assert "aten::&lt;op&gt;" in document
    assert "max_split_size_mb:&quot;128&quot;&amp;x" in document
    checker = _parse(document)
    assert checker.errors == [] and checker.urls == []
    assert evil in " ".join(checker.text)


def test_html_downsamples_the_timeline(
    estimate_factory: Factory, timeline_factory: Callable[..., Timeline]
) -> None:
    timeline = timeline_factory(n=200_000, steps=2)
    document = estimate_html(estimate_factory(timeline=timeline), max_points=1000)
    polylines = re.findall(r'<polyline points="([^"]*)"', document)
    assert len(polylines) == 2
    assert all(len(points.split()) <= 1000 for points in polylines)
    assert len(document) < 400_000


def test_phase_bands_have_hover_titles(estimate_factory: Factory) -> None:
    document = estimate_html(estimate_factory())
    titles = re.findall(r'<g class="phase"><title>([^<]*)</title>', document)
    assert [t.split(":")[0] for t in titles] == [
        "step1.forward",
        "step1.backward",
        "step1.optimizer",
    ]
    assert "peak allocated" in titles[1]


def test_svg_is_well_formed_xml(estimate_factory: Factory, tmp_path: Path) -> None:
    path = tmp_path / "memory.svg"
    write_estimate_svg(estimate_factory(gpu="4090", modules=[("<script>", 1)]), path)
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.findall(".//{http://www.w3.org/2000/svg}polyline")
    assert root.findall(".//{http://www.w3.org/2000/svg}circle")  # the peak


@pytest.mark.parametrize("gpu", [None, "h200", "4090"])
def test_svg_in_html_is_xml_too(estimate_factory: Factory, gpu: str | None) -> None:
    document = estimate_html(estimate_factory(gpu=gpu))
    svg = document[document.index("<svg") : document.index("</svg>") + len("</svg>")]
    ET.fromstring(svg)
