"""Convolutions by shape class (the step-time model): the kinds a trace records, the
curve each is timed by (its own, the nearest class, the general one), the calibration script's
convolution part on the CPU and the fit that ships its curves."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.planner import Calibration, step_time
from memfit.trace import PhaseCost, StepCosts, trace_workload
from memfit.trace._costs import op_kind
from memfit.workload import make_workload

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
US = 1e-6


@pytest.fixture(scope="module")
def scripts() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import calibrate_gpu
        import calibration_fit

        yield calibrate_gpu, calibration_fit
    finally:
        sys.path.remove(str(BENCHMARKS))


def _kinds(costs: StepCosts, phase: str) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for kind, flops, _ in costs.phases[f"step2.{phase}"].ops:
        if kind.startswith("conv"):
            out.setdefault(kind, []).append(flops)
    return out


def test_a_resnet18_trace_records_its_convolutions_by_shape_class() -> None:
    torchvision = pytest.importorskip("torchvision")

    workload = make_workload(
        lambda: torchvision.models.resnet18(num_classes=10),
        lambda: (torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))),
        loss_fn=lambda m, b: nn.functional.cross_entropy(m(b[0]), b[1]),
        precision="bf16-mixed",
    )
    costs = trace_workload(workload, resolve_gpu("h200"), costs=True).costs
    assert costs is not None
    forward, backward = _kinds(costs, "forward"), _kinds(costs, "backward")
    counts = {k: len(v) for k, v in forward.items()}
    # the 7x7 stem, 3x3 convolutions, the stride-2 3x3 and 1x1 (downsample) of stages 2-4
    assert counts == {
        "conv:k7s2:bf16": 1,
        "conv:k3:bf16": 13,
        "conv:k3s2:bf16": 3,
        "conv:k1s2:bf16": 3,
    }
    assert {k.replace("_bwd", ""): len(v) for k, v in backward.items()} == counts
    # the stem's input (the images) needs no gradient: its backward is the weight's only
    assert backward["conv_bwd:k7s2:bf16"] == forward["conv:k7s2:bf16"]
    assert sum(backward["conv_bwd:k3:bf16"]) == 2 * sum(forward["conv:k3:bf16"])


@pytest.mark.parametrize(
    ("layer", "shape", "kind"),
    [
        (nn.Conv2d(3, 8, 16, stride=16), (1, 3, 32, 32), "conv:k16s16:fp32"),
        (nn.Conv2d(8, 8, 3, padding=1, groups=8), (1, 8, 8, 8), "conv:k3dw:fp32"),
        (nn.Conv2d(8, 8, 3, padding=1, groups=2), (1, 8, 8, 8), "conv:k3g:fp32"),
        (  # ConvNeXt's: a permuted (channels-last) input, which cuDNN runs with NHWC kernels
            nn.Conv2d(8, 8, 7, padding=3, groups=8),
            (1, 8, 8, 8, "channels_last"),
            "conv:k7dwcl:fp32",
        ),
        (nn.Conv2d(8, 8, (3, 1)), (1, 8, 8, 8), "conv:k3x1:fp32"),
        (nn.ConvTranspose2d(8, 4, 2, stride=2), (1, 8, 8, 8), "conv:k2s2t:fp32"),
        (nn.Conv1d(8, 8, 5, stride=2), (1, 8, 32), "conv:k5s2:fp32"),
    ],
)
def test_other_convolutions_get_a_class_too(
    layer: nn.Module, shape: tuple[int, ...], kind: str
) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Kinds(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is torch.ops.aten.convolution.default:
                seen.append(op_kind(func, args, kwargs))
            return func(*args, **(kwargs or {}))

    x = torch.randn(shape[:4] if shape[-1] == "channels_last" else shape, device="meta")  # type: ignore[arg-type]
    if shape[-1] == "channels_last":
        x = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    with Kinds():
        layer.to("meta")(x)
    assert seen == [kind]


def _curve(seconds_at_1e9: float) -> tuple[tuple[float, float], ...]:
    return ((1e8, seconds_at_1e9 / 10), (1e9, seconds_at_1e9), (1e12, seconds_at_1e9 * 1000))


def _calibration(curves: dict[str, tuple[tuple[float, float], ...]], **extra: Any) -> Calibration:
    return Calibration(
        gpu="test",
        source="made up for the test",
        curves={"mm:bf16": _curve(1 * US), **curves},
        kernel_floor=1 * US,
        bandwidth=1e15,
        host={"default": 1 * US, "optimizer_param": 0.0},
        **extra,
    )


PER_CLASS = {
    "conv:k1:bf16": _curve(20 * US),
    "conv:k3:bf16": _curve(10 * US),
    "conv:k3s2:bf16": _curve(30 * US),
    "conv:k7s2:bf16": _curve(40 * US),
    "conv:k16s16:bf16": _curve(50 * US),
    "conv_bwd:k3:bf16": _curve(25 * US),
    "conv:bf16": _curve(5 * US),  # an older calibration's general curve
    "conv:fp32": _curve(15 * US),
}


@pytest.mark.parametrize(
    ("kind", "curve"),
    [
        ("conv:k3s2:bf16", "conv:k3s2:bf16"),  # its own
        ("conv:k3s2:fp16", "conv:k3s2:bf16"),  # fp16 reads bfloat16's: the same tensor cores
        ("conv:k5:bf16", "conv:k3:bf16"),  # the nearest kernel
        ("conv:k1s2:bf16", "conv:k1:bf16"),  # kernel 1, stride 2: nearer 1x1 than 3x3 stride 2
        ("conv:k14s14:bf16", "conv:k16s16:bf16"),  # a ViT-L/14 patch embedding
        ("conv:k3s2dw:bf16", "conv:k3s2:bf16"),  # depthwise, none measured: the dense class
        ("conv:k3x1:bf16", "conv:k3:bf16"),
        ("conv:odd:bf16", "conv:k3:bf16"),  # a class it cannot read: 3x3
        ("conv_bwd:k3:bf16", "conv_bwd:k3:bf16"),
        ("conv_bwd:k1:bf16", "conv_bwd:k3:bf16"),  # the nearest backward before any forward
        ("conv:k3:fp32", "conv:fp32"),  # no float32 class: the general float32 curve
        ("conv:bf16", "conv:bf16"),  # an old-style kind
    ],
)
def test_a_convolution_reads_its_class_or_the_nearest_measured(kind: str, curve: str) -> None:
    assert _calibration(PER_CLASS).curve_key(kind) == curve


def test_a_depthwise_convolution_reads_a_depthwise_class_before_any_dense_one() -> None:
    cal = _calibration({**PER_CLASS, "conv:k3dw:bf16": _curve(80 * US)})
    assert cal.curve_key("conv:k7dw:bf16") == "conv:k3dw:bf16"  # not the 7x7 stem's
    assert cal.curve_key("conv:k3s2dw:bf16") == "conv:k3dw:bf16"
    assert cal.curve_key("conv:k3s2:bf16") == "conv:k3s2:bf16"  # a dense one keeps its own
    # channels-last depthwise: its own class where measured, else the channels-first one
    assert cal.curve_key("conv:k7dwcl:bf16") == "conv:k3dw:bf16"
    measured = _calibration(
        {**PER_CLASS, "conv:k3dw:bf16": _curve(80 * US), "conv:k7dwcl:bf16": _curve(20 * US)}
    )
    assert measured.curve_key("conv:k3dwcl:bf16") == "conv:k7dwcl:bf16"
    assert measured.curve_key("conv:k3dw:bf16") == "conv:k3dw:bf16"


def test_without_per_class_curves_convolutions_read_the_general_curves_as_before() -> None:
    old = _calibration({"conv:bf16": _curve(5 * US), "conv:fp32": _curve(15 * US)})
    assert old.curve_key("conv:k1s2:bf16") == "conv:bf16"
    assert old.curve_key("conv_bwd:k7s2:bf16") == "conv:bf16"  # a backward as its forward
    assert old.curve_key("conv_bwd:k3:fp32") == "conv:fp32"
    assert old.curve_key("conv:k3:fp16") == "conv:bf16"
    assert _calibration({}).curve_key("conv_bwd:k3:fp32") == "mm:bf16"  # never fails


def test_graph_timed_curves_keep_their_short_points() -> None:
    curve = {"conv:k1:bf16": ((1e8, 2 * US), (1e9, 4 * US), (1e11, 100 * US))}
    eager = _calibration(curve)
    graphed = _calibration(curve, graph_timed=frozenset(curve))
    # eagerly timed, points under 12 us were the host's launch: a constant rate from 1e11
    assert eager.gpu_seconds("conv:k1:bf16", int(1e9), 0) == pytest.approx(1 * US)
    assert graphed.gpu_seconds("conv:k1:bf16", int(1e9), 0) == pytest.approx(4 * US)


def _fake_runs() -> tuple[dict[str, Any], dict[str, Any]]:
    meta = {"date": "2026-12-02", "torch": "2.x", "cuda": "13.0", "gpu": "Fake GPU"}
    complete = {
        "meta": meta,
        "curves": {
            "mm:bf16": [[1e9, 1e-5], [1e12, 2e-3]],
            "conv:bf16": [[1e9, 1e-5], [1e12, 2e-3]],
            "mem": [[1e3, 2e-6], [1e9, 3e-4]],
        },
        "kernel_floor_seconds": 1e-6,
        "input_seconds_per_byte": {"h2d": 1e-10},
        "tiny": [],
    }
    conv_only = {
        "meta": {**meta, "parts": ["conv"], "command": "calibrate_gpu.py --only conv"},
        "curves": {
            "conv:k1s2:bf16": [[1e8, 8e-6], [1e10, 1e-4], [1e12, 4e-3]],
            "conv_bwd:k1s2:bf16": [[2e8, 3e-5], [2e10, 5e-4], [2e12, 1e-2]],
        },
        "graph_timed": ["conv:k1s2:bf16", "conv_bwd:k1s2:bf16"],
    }
    return complete, conv_only


def test_the_fit_ships_per_class_curves_and_the_model_reads_them(scripts: Any) -> None:
    _, fit = scripts
    complete, conv_only = _fake_runs()
    for runs in ([complete, conv_only], [conv_only, complete]):  # a conv-only file anywhere
        shipped = fit.shipped_curves(runs)
        assert set(shipped["curves"]) == {
            "mm:bf16",
            "conv:bf16",
            "conv:k1s2:bf16",
            "conv_bwd:k1s2:bf16",
        }
        assert shipped["graph_timed"] == ["conv:k1s2:bf16", "conv_bwd:k1s2:bf16"]
        assert "Fake GPU" in shipped["conv_source"]
    data = {
        "gpu": "Fake GPU",
        "source": "test",
        "kernel_floor": 1e-6,
        "bandwidth": 1e15,
        "host": {"default": 1e-6, "optimizer_param": 0.0},
        **shipped,
    }
    cal = Calibration.from_dict(data)
    assert cal.gpu_seconds("conv:k1s2:bf16", int(1e10), 0) == pytest.approx(1e-4)
    assert cal.gpu_seconds("conv_bwd:k1s2:bf16", int(2e8), 0) == pytest.approx(3e-5)
    assert cal.gpu_seconds("conv:k3:bf16", int(1e10), 0) == pytest.approx(1e-4)  # nearest
    ops = [("conv:k1s2:bf16", int(1e12), 0), ("conv_bwd:k1s2:bf16", int(2e12), 0)]
    costs = StepCosts({"step2.forward": PhaseCost(ops[:1]), "step2.backward": PhaseCost(ops[1:])})
    got = step_time(costs, cal, style="eager")
    # the host issues each op (1 us) and the GPU runs it on its own curve; the backward's is
    # issued while the forward's kernel still runs
    assert got.seconds == pytest.approx(1e-6 + 4e-3 + 1e-2)
    assert got.bound == "gpu"


def test_the_fit_of_old_calibrations_ships_what_it_did(scripts: Any) -> None:
    _, fit = scripts
    complete, _ = _fake_runs()
    assert fit.shipped_curves([complete]) == {
        "curves": {
            "mm:bf16": complete["curves"]["mm:bf16"],
            "conv:bf16": complete["curves"]["conv:bf16"],
        }
    }


def test_the_fit_refuses_files_that_hold_no_complete_calibration(scripts: Any) -> None:
    _, fit = scripts
    _, conv_only = _fake_runs()
    with pytest.raises(SystemExit, match=r"no complete calibration.*calibrate_gpu\.py whole"):
        fit.shipped_curves([conv_only])


def test_the_fit_refuses_convolution_curves_measured_on_the_cpu(scripts: Any) -> None:
    _, fit = scripts
    complete, conv_only = _fake_runs()
    conv_only["meta"].update(gpu="cpu", command="calibrate_gpu.py --device cpu")
    with pytest.raises(SystemExit, match=r"--device cpu'.*on the CPU.*run calibrate_gpu\.py on"):
        fit.shipped_curves([complete, conv_only])


def test_the_calibration_script_picks_sizes_across_the_range(scripts: Any) -> None:
    calibrate, _ = scripts
    for name, spec in calibrate.CONV_CLASSES.items():
        points = calibrate.conv_points(spec, calibrate.CONV_FLOPS, 2)
        flops = [calibrate.conv_flops(spec, shape, batch) for shape, batch in points]
        if "groups" in spec:  # a depthwise layer's work is small: a step's reach 1e10
            assert len(flops) >= 5 and min(flops) < 2e8 and max(flops) > 9e9, name
            continue
        assert len(flops) >= 8, name
        assert min(flops) < 2e8 and max(flops) > 2e11, name


def test_the_calibration_scripts_convolution_part_runs_on_the_cpu(scripts: Any) -> None:
    calibrate, _ = scripts
    curves, rows = calibrate.conv_curves("cpu", (1e7,), ("fp32",))
    assert not [r for r in rows if "error" in r]
    assert {k.split(":")[1] for k in curves} == {
        "k1",
        "k3",
        "k3s2",
        "k1s2",
        "k7s2",
        "k3dw",
        "k3s2dw",
        "k5dw",
        "k7dw",
        "k3g",
        "k7dwcl",
        "k3dwcl",
    }
    by_class = {r["class"]: r for r in rows}
    assert by_class["k1"]["bwd_flops"] == 2 * by_class["k1"]["flops"]  # input and weight
    # a grouped one's as memfit's trace counts it (PyTorch's formula: groups times as many)
    assert by_class["k3dw"]["bwd_flops"] == 2 * by_class["k3dw"]["flops"]
    assert by_class["k7s2"]["bwd_flops"] == by_class["k7s2"]["flops"]  # the weight's only
    assert all(s > 0 for curve in curves.values() for _, s in curve)


def test_the_calibration_script_refuses_other_parts_on_the_cpu(
    scripts: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibrate, _ = scripts
    with pytest.raises(SystemExit) as exit_info:
        calibrate.main(["--out", str(tmp_path / "x.json"), "--device", "cpu", "--only", "mm"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--device cpu measures the convolutions only" in err and "mm" in err
    assert "Traceback" not in err
