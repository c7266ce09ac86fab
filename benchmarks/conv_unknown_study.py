"""How well can the workspace of a convolution the cuDNN table lacks be predicted from the rest?

memfit reads cuDNN's convolution workspaces off a table measured on sm90 GPUs
(``src/memfit/trace/data/cudnn_sm90.json``). A shape no probe ran has to be given a workspace
from the table's other shapes; a prediction under the real one makes an estimate under the
GPU's peak (the user runs out of memory), one far over wastes the headroom the estimate is for.
This script holds shapes out of the table and predicts them from what is left, with each
candidate predictor, in two ways:

* ``leave_one_out``: every key of the committed table, predicted from all the others;
* ``as_predicted``: for each probe file after the first (in the table's build order), the keys
  it added, predicted from the table built from the files before it only -- what a prediction
  made before that probe ran would have used.

Each (key, phase, batch) measured is one sample. Per phase and dtype it reports the share of
samples under-predicted (and under by more than a tenth of the larger of the input and output,
and predicted none where the real one is that large: the dangerous case), the median and 95th
percentile of predicted over actual (over the samples with a workspace), and bytes-weighted
sums: predicted over actual, and the bytes over and under as shares of the samples' larger
tensor bytes. CPU only: it reads the committed probe files.

    python benchmarks/conv_unknown_study.py [--out RESULTS.json]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import importlib.util
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memfit.trace._cudnn import _ITEM_SIZES, _at_batch, _bound_ratios, _kinds, _out_size, _packaged

ROOT = Path(__file__).parents[1]
# the table's probe files in its build order (as tests/trace/test_cudnn_workspaces.py lists them)
PROBES = [
    "2026-11-30-h200-estimate-accuracy/cudnn_probe.json.gz",
    "2026-11-30-h200-finder-monitor-cudnn/cudnn_probe_conv.json.gz",
    "2026-11-30-h200-finder-monitor-cudnn/cudnn_probe_lstm.json.gz",
    "2026-12-01-h200-user-steps-compiled/cudnn/cudnn_probe_families.json.gz",
    "2026-12-01-h200-user-steps-compiled/cudnn/cudnn_probe_regnet.json.gz",
    "2026-12-02-h200-activation-offload/cudnn_probe_convnext_nhwc.json.gz",
    "2026-12-06-h100-zoo-convolutions/zoo-convs-probe.json.gz",
    "2026-12-06-h100-conv-probes/zoo-convs-probe.json.gz",
    "2026-12-06-h100-conv-probes/op-convs-probe.json.gz",
    "2026-12-07-h100-zoo-held-out-convolutions/held-convs-probe.json.gz",
    "2026-12-07-h100-new-families-convolutions/new-convs-probe.json.gz",
    "2026-12-07-h200-vision-language-convolutions/vlm-hw4-convs-probe.json.gz",
    "2026-12-07-h200-lstm-probes/hidden-lstm-probe.json.gz",
    "2026-12-07-h200-lstm-probes/sequencer-lstm-probe.json.gz",
]
# the probes of the held-out sets: each ran after that set was predicted with the table before it
HELD_OUT = PROBES[9:12]
PHASES = ("fwd", "dgrad", "wgrad", "bias")
MATERIAL = 0.1  # an under-prediction by more than this share of the larger tensor is material

Conv = dict[str, dict[str, dict[str, list[int]]]]
Predict = Callable[[str, str, int], int]  # key, phase, batch -> bytes


def _builder() -> Any:
    path = ROOT / "benchmarks/build_cudnn_table.py"
    spec = importlib.util.spec_from_file_location("build_cudnn_table", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(name: str) -> dict[str, Any]:
    with gzip.open(ROOT / "benchmarks/results" / name, "rt") as fh:
        probe: dict[str, Any] = json.load(fh)
    return probe


# -- shapes, ratios and neighbours ------------------------------------------------------------

Ratios = dict[tuple[str, str], float]

SHARE = 0.95  # of the table's large convolutions whose workspace the bound covers
MIN_SAMPLES = 20  # fewer of a kind and phase: the bound of a less specific kind
LARGE = 16 * 2**20  # bytes of input or output from which a convolution counts as large


@dataclass(frozen=True)
class KeyShape:
    """A table key's convolution: channels, spatial sizes in and out, output channels,
    kernel, stride, padding, groups, element size, and the key's tags (dtype first)."""

    c: int
    spatial: tuple[int, ...]
    out: tuple[int, ...]
    k: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    groups: int
    tags: tuple[str, ...]

    @staticmethod
    @functools.lru_cache(maxsize=65536)
    def parse(key: str) -> KeyShape:
        """The shape of a key of :meth:`memfit.trace._cudnn.ConvShape.key`."""
        text, *tags = key.split("|")
        fields = [int(f) for f in text.split(",")]
        n = (len(fields) - 3) // 4  # c, spatial n, k, kernel n, stride n, padding n, groups
        c, spatial, k = fields[0], tuple(fields[1 : 1 + n]), fields[1 + n]
        kernel, stride, padding = (
            tuple(fields[2 + n + i * n : 2 + n + (i + 1) * n]) for i in range(3)
        )
        options = dict(t.partition("=")[::2] for t in tags[1:])
        dilation = [int(d) for d in options["dil"].split(",")] if "dil" in options else [1] * n
        transposed = "tr" in options
        out_pad = [int(p) for p in options["tr"].split(",")] if options.get("tr") else [0] * n
        out = tuple(
            max(_out_size(*dims, transposed=transposed) + (pad if transposed else 0), 0)
            for *dims, pad in zip(spatial, kernel, stride, padding, dilation, out_pad, strict=True)
        )
        return KeyShape(c, spatial, out, k, kernel, stride, padding, fields[-1], tuple(tags))

    @property
    def nhwc(self) -> bool:
        return "nhwc" in self.tags

    def largest(self, batch: int) -> int:
        """The larger of the input's and the output's bytes at ``batch``."""
        per_sample = max(self.c * math.prod(self.spatial), self.k * math.prod(self.out))
        return per_sample * batch * _ITEM_SIZES[self.tags[0]]

    def kinds(self, wide: bool = True) -> tuple[str, ...]:
        """:func:`memfit.trace._cudnn._kinds`, the most specific last; ``wide``: a 3-d one's
        own kinds after them (``3d dense``, ``3d patch``...)."""
        kinds = _kinds(self.c, self.groups, self.kernel, self.stride, self.padding)
        if wide and len(self.kernel) == 3:
            return (*kinds, *(f"3d {kind}" for kind in kinds))
        return kinds

    def cls(self) -> tuple[object, ...]:
        """What a neighbour must share: kernel, stride, padding, grouping, and the tags."""
        grouping = _kinds(self.c, self.groups, (1,), (1,), (0,))[0]
        return self.kernel, self.stride, self.padding, grouping, self.tags

    def features(self) -> tuple[float, ...]:
        """Where it lies among its class: log channels in and out, spatial sizes in and out
        and groups."""
        sizes = (self.c, self.k, math.prod(self.spatial), math.prod(self.out), self.groups)
        return tuple(math.log(max(s, 1)) for s in sizes)


def ratio_samples(
    key: str, phases: dict[str, dict[str, list[int]]], wide: bool = True
) -> dict[tuple[str, str], list[float]]:
    """A key's workspaces over its larger tensor's bytes, per kind (``""``: every kind) and
    phase, at the batches where that tensor is large. Not ``wide``: 2-d keys without a
    dilation or transposition only."""
    shape = KeyShape.parse(key)
    if not wide and (len(shape.kernel) != 2 or set(shape.tags[1:]) - {"nhwc"}):
        return {}
    out: dict[tuple[str, str], list[float]] = {}
    for phase, by_batch in phases.items():
        for batch, sizes in by_batch.items():
            largest = shape.largest(int(batch))
            if largest >= LARGE:
                for kind in ("", *shape.kinds(wide)):
                    out.setdefault((kind, phase), []).append(sum(sizes) / largest)
    return out


def percentiles(pooled: Mapping[tuple[str, str], list[float]]) -> Ratios:
    """Per kind and phase with :data:`MIN_SAMPLES`, the ratio :data:`SHARE` of them stay under."""
    ratios = {}
    for group, values in pooled.items():
        if len(values) >= MIN_SAMPLES:
            ordered = sorted(values)
            ratios[group] = ordered[min(len(ordered) - 1, int(SHARE * len(ordered)))]
    return ratios


def bound_ratios(conv: Conv, wide: bool = True) -> Ratios:
    """The bound's ratios read off a table (``wide``: every key, 3-d kinds of their own)."""
    pooled: dict[tuple[str, str], list[float]] = {}
    for key, phases in conv.items():
        for group, values in ratio_samples(key, phases, wide).items():
            pooled.setdefault(group, []).extend(values)
    return percentiles(pooled)


def ratio_for(ratios: Ratios, kinds: Sequence[str], phase: str) -> float:
    """The ratio of the most specific of ``kinds`` with one (none: every kind's)."""
    for kind in reversed(kinds):
        if (kind, phase) in ratios:
            return ratios[kind, phase]
    return ratios.get(("", phase), 0.0)


class Index:
    """A table's keys by class (:meth:`KeyShape.cls`) and phase probed, for the nearest of a
    shape's class: their keys, their features as an array, and their measurements."""

    def __init__(self, conv: Conv) -> None:
        members: dict[tuple[object, str], list[str]] = {}
        for key, phases in conv.items():
            for phase, by_batch in phases.items():
                if by_batch:
                    members.setdefault((KeyShape.parse(key).cls(), phase), []).append(key)
        self.conv = conv
        self.keys = {group: sorted(keys) for group, keys in members.items()}
        self.position = {g: {k: i for i, k in enumerate(keys)} for g, keys in self.keys.items()}
        self.features = {
            group: np.array([KeyShape.parse(k).features() for k in keys])
            for group, keys in self.keys.items()
        }

    @staticmethod
    def of(conv: Conv) -> Index:
        return Index(conv)

    def ratio(self, key: str, phase: str, batch: int) -> float:
        """A measured key's workspace over its larger tensor's bytes at ``batch``."""
        sizes, _ = _at_batch(self.conv[key][phase], batch)
        return sum(sizes) / max(KeyShape.parse(key).largest(batch), 1)

    def nearest(
        self, shape: KeyShape, phase: str, batch: int, count: int, held: str | None = None
    ) -> list[float]:
        """The ratios (:meth:`ratio`) of the ``count`` nearest measured keys of ``shape``'s
        class with ``phase`` probed, nearest first (``held``: a key left out)."""
        group = (shape.cls(), phase)
        keys = self.keys.get(group)
        if not keys:
            return []
        distances = ((self.features[group] - np.array(shape.features())) ** 2).sum(axis=1)
        if held in self.position[group]:
            distances[self.position[group][held]] = np.inf
        order = np.argsort(distances, kind="stable")[:count]
        return [self.ratio(keys[i], phase, batch) for i in order if np.isfinite(distances[i])]

    def class_ratios(self, shape: KeyShape, phase: str) -> list[tuple[str, int, float]]:
        """Every measured ratio of ``shape``'s class in ``phase``, with its key and larger
        tensor's bytes."""
        return [
            (key, KeyShape.parse(key).largest(int(batch)), self.ratio(key, phase, int(batch)))
            for key in self.keys.get((shape.cls(), phase), ())
            for batch in self.conv[key][phase]
        ]


# -- candidates -------------------------------------------------------------------------------


class Bound:
    """The ratio bound as ``memfit.trace._cudnn`` had it (2-d keys only, 3-d ones bounded by
    the 2-d ratios) or with every key in the samples and 3-d kinds of their own (``wide``);
    ``held`` leaves one key's samples out of the percentiles (leave-one-out)."""

    def __init__(self, conv: Conv, wide: bool) -> None:
        self.wide = wide
        self.per_key = {key: ratio_samples(key, phases, wide) for key, phases in conv.items()}
        pooled: dict[tuple[str, str], list[float]] = {}
        for samples in self.per_key.values():
            for group, values in samples.items():
                pooled.setdefault(group, []).extend(values)
        self.sorted = {g: np.sort(np.array(v)) for g, v in pooled.items()}
        self.ratios = percentiles(pooled)
        self.held: str | None = None
        self.memo: tuple[str | None, dict[tuple[str, str], float]] = (None, self.ratios)

    def ratios_now(self) -> dict[tuple[str, str], float]:
        if self.memo[0] == self.held:
            return self.memo[1]
        own = self.per_key.get(self.held or "", {})
        if not own:
            return self.ratios
        ratios = dict(self.ratios)
        for group, values in own.items():
            left = self.sorted[group]
            for v in values:
                left = np.delete(left, int(np.searchsorted(left, v)))
            if len(left) >= MIN_SAMPLES:
                ratios[group] = float(left[min(len(left) - 1, int(SHARE * len(left)))])
            else:
                ratios.pop(group, None)
        self.memo = (self.held, ratios)
        return ratios

    def __call__(self, key: str, phase: str, batch: int) -> int:
        shape = KeyShape.parse(key)
        if phase == "bias" and not shape.nhwc:
            return 0
        ratio = ratio_for(self.ratios_now(), shape.kinds(self.wide), phase)
        return round(shape.largest(batch) * ratio)


@dataclass
class Neighbours:
    """The ``k`` nearest keys of the same class (kernel, stride, padding, dilation,
    transposition, kind of grouping, dtype, layout, dimensions), in log space over channels in
    and out and spatial sizes in and out, each scaled by the bytes ratio; ``combine`` takes
    their ratios to one (max, median). None of its class: ``fallback``."""

    conv: Conv
    fallback: Predict
    k: int = 1
    combine: Callable[[list[float]], float] = max
    held: str | None = None
    index: Index = field(init=False)

    def __post_init__(self) -> None:
        self.index = Index.of(self.conv)

    def __call__(self, key: str, phase: str, batch: int) -> int:
        shape = KeyShape.parse(key)
        ratios = self.index.nearest(shape, phase, batch, self.k, self.held)
        if not ratios:
            return self.fallback(key, phase, batch)
        return round(shape.largest(batch) * self.combine(ratios))


@dataclass
class ClassEnvelope:
    """Per class and phase, the ratio ``share`` of the class's samples stay under (the upper
    envelope of a fit of the workspace against the larger tensor's bytes), from at least
    ``least`` samples; else ``fallback``."""

    conv: Conv
    fallback: Predict
    share: float = 1.0
    least: int = 3
    held: str | None = None
    index: Index = field(init=False)

    large_only: bool = False  # only the samples whose larger tensor is large
    cache: dict[tuple[object, str], list[tuple[str, int, float]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = Index.of(self.conv)

    def __call__(self, key: str, phase: str, batch: int) -> int:
        shape = KeyShape.parse(key)
        group = (shape.cls(), phase)
        if group not in self.cache:
            self.cache[group] = self.index.class_ratios(shape, phase)
        values = [
            ratio
            for k, largest, ratio in self.cache[group]
            if k != self.held and (largest >= LARGE or not self.large_only)
        ]
        if len(values) < self.least:
            return self.fallback(key, phase, batch)
        values.sort()
        ratio = values[min(len(values) - 1, int(self.share * len(values)))]
        return round(shape.largest(batch) * ratio)


def _capped(first: Predict, cap: Predict) -> Predict:
    return lambda key, phase, batch: min(first(key, phase, batch), cap(key, phase, batch))


def candidates(conv: Conv) -> tuple[dict[str, Predict], list[Any]]:
    """The predictors, built from ``conv``, and the objects a leave-one-out sets ``held`` on."""
    bound, wide = Bound(conv, wide=False), Bound(conv, wide=True)
    nn1 = Neighbours(conv, wide, k=1)
    nn3 = Neighbours(conv, wide, k=3)
    nn3_median = Neighbours(conv, wide, k=3, combine=lambda r: float(np.median(r)))
    envelope = ClassEnvelope(conv, wide)
    envelope_p90 = ClassEnvelope(conv, wide, share=0.9, least=10)
    envelope_p95 = ClassEnvelope(conv, wide, share=0.95, least=20)
    envelope_large = ClassEnvelope(conv, wide, large_only=True)
    nn5, nn10 = Neighbours(conv, wide, k=5), Neighbours(conv, wide, k=10)
    predictors: dict[str, Predict] = {
        "bound (2-d ratios, as before)": bound,
        "bound with 3-d kinds": wide,
        "nearest 1": nn1,
        "nearest 3, max": nn3,
        "nearest 3, median": nn3_median,
        "class envelope (max)": envelope,
        "class envelope (p90)": envelope_p90,
        "nearest 1 capped by bound": _capped(nn1, wide),
        "nearest 3 max capped by bound": _capped(nn3, wide),
        "class envelope capped by bound": _capped(envelope, wide),
        "class p95 (20+) capped by bound": _capped(envelope_p95, wide),
        "class envelope of large capped by bound": _capped(envelope_large, wide),
        "nearest 5 max capped by bound": _capped(nn5, wide),
        "nearest 10 max capped by bound": _capped(nn10, wide),
    }
    holders = [bound, wide, nn1, nn3, nn3_median, envelope, envelope_p90]
    return predictors, [*holders, envelope_p95, envelope_large, nn5, nn10]


# -- scoring -----------------------------------------------------------------------------------


@dataclass
class Sample:
    key: str
    phase: str
    batch: int
    actual: int
    largest: int

    @property
    def dtype(self) -> str:
        return self.key.split("|")[1]


def samples_of(conv: Conv, keys: Iterable[str]) -> list[Sample]:
    out = []
    for key in keys:
        shape = KeyShape.parse(key)
        for phase, by_batch in conv[key].items():
            for batch, sizes in by_batch.items():
                b = int(batch)
                out.append(Sample(key, phase, b, sum(sizes), shape.largest(b)))
    return out


def score(rows: list[tuple[Sample, int]]) -> dict[str, Any]:
    """The metrics of (sample, predicted) pairs."""
    if not rows:
        return {"samples": 0}
    actual = np.array([s.actual for s, _ in rows], float)
    pred = np.array([p for _, p in rows], float)
    largest = np.array([s.largest for s, _ in rows], float)
    some = actual > 0
    ratio = pred[some] / actual[some]
    material = actual - pred > MATERIAL * largest
    return {
        "samples": len(rows),
        "with_workspace": int(some.sum()),
        "under": round(float(np.mean(pred < actual)), 4),
        "under_material": round(float(np.mean(material)), 4),
        "none_predicted_material": int(np.sum(material & (pred == 0))),
        "median_pred_over_actual": round(float(np.median(ratio)), 3) if some.any() else None,
        "p95_pred_over_actual": round(float(np.percentile(ratio, 95)), 3) if some.any() else None,
        "bytes_pred_over_actual": round(float(pred.sum() / actual.sum()), 3)
        if actual.sum()
        else None,
        "bytes_over_per_largest": round(
            float(np.maximum(pred - actual, 0).sum() / largest.sum()), 4
        ),
        "bytes_under_per_largest": round(
            float(np.maximum(actual - pred, 0).sum() / largest.sum()), 4
        ),
    }


def grouped(rows: list[tuple[Sample, int]]) -> dict[str, Any]:
    """Scores over all samples, per phase, and per phase and dtype."""
    out: dict[str, Any] = {"all": score(rows)}
    out["3-d"] = score([r for r in rows if len(KeyShape.parse(r[0].key).kernel) == 3])
    for phase in PHASES:
        in_phase = [r for r in rows if r[0].phase == phase]
        out[phase] = score(in_phase)
        for dtype in ("fp32", "bf16", "fp16"):
            out[f"{phase}|{dtype}"] = score([r for r in in_phase if r[0].dtype == dtype])
    return out


# -- the two schemes ---------------------------------------------------------------------------


def leave_one_out(conv: Conv) -> dict[str, Any]:
    predictors, holders = candidates(conv)
    rows: dict[str, list[tuple[Sample, int]]] = {name: [] for name in predictors}
    for key in sorted(conv):
        for holder in holders:
            holder.held = key
        for sample in samples_of(conv, [key]):
            for name, predict in predictors.items():
                rows[name].append((sample, predict(key, sample.phase, sample.batch)))
    return {name: grouped(r) for name, r in rows.items()}


def as_predicted(build: Any) -> dict[str, Any]:
    probes = [_read(name) for name in PROBES]
    out: dict[str, Any] = {}
    pooled: dict[str, list[tuple[Sample, int]]] = {}
    held_pooled: dict[str, list[tuple[Sample, int]]] = {}
    for i in range(1, len(PROBES)):
        added = build.build(probes[i])["conv"] if probes[i]["conv"] else {}
        before: Conv = build.build(build.merge(probes[:i]))["conv"]
        new = sorted(set(added) - set(before))
        if not new:
            continue
        predictors, _ = candidates(before)
        samples = samples_of(added, new)
        per_file = {}
        for name, predict in predictors.items():
            rows = [(s, predict(s.key, s.phase, s.batch)) for s in samples]
            per_file[name] = grouped(rows)
            pooled.setdefault(name, []).extend(rows)
            if PROBES[i] in HELD_OUT:
                held_pooled.setdefault(name, []).extend(rows)
        out[PROBES[i]] = {"keys_added": len(new), "table_keys_before": len(before), **per_file}
    out["held-out probes pooled"] = {name: grouped(r) for name, r in held_pooled.items()}
    out["every later probe pooled"] = {name: grouped(r) for name, r in pooled.items()}
    return out


def _summary(name: str, result: dict[str, Any]) -> None:
    print(f"\n== {name}")
    head = f"{'candidate':42s} {'under':>6s} {'mat.':>6s} {'none':>5s} {'med':>6s} {'p95':>7s}"
    print(head + f" {'bytes':>6s} {'over/L':>7s} {'under/L':>8s}")
    for cand, groups in result.items():
        s = groups["all"]
        print(
            f"{cand:42s} {s['under']:6.3f} {s['under_material']:6.3f} "
            f"{s['none_predicted_material']:5d} {s['median_pred_over_actual']:6.2f} "
            f"{s['p95_pred_over_actual']:7.2f} {s['bytes_pred_over_actual']:6.2f} "
            f"{s['bytes_over_per_largest']:7.3f} {s['bytes_under_per_largest']:8.4f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    build = _builder()
    conv = _packaged()
    # the study's bound is the one memfit had, read off the same table
    assert Bound(conv, wide=False).ratios == _bound_ratios.__wrapped__("cudnn_sm90.json"), (
        "the study's bound differs from memfit's"
    )
    started = time.perf_counter()
    schemes = {"as_predicted": as_predicted(build), "leave_one_out": leave_one_out(conv)}
    meta = _read(PROBES[0])["meta"]
    result = {
        "meta": {
            "table_keys": len(conv),
            "probes": PROBES,
            "held_out_probes": HELD_OUT,
            "probe_gpus": sorted({_read(p)["meta"]["gpu"] for p in PROBES}),
            "probe_torch": meta["torch"],
            "probe_cudnn": meta["cudnn"],
            "material_share": MATERIAL,
            "seconds": round(time.perf_counter() - started, 1),
        },
        **schemes,
    }
    for label in ("held-out probes pooled", "every later probe pooled"):
        _summary(f"as predicted: {label}", schemes["as_predicted"][label])
    _summary("leave one key out", schemes["leave_one_out"])
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if math.isfinite(result["meta"]["seconds"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
