"""cuDNN convolution workspaces come from the table measured on an H200, in the order a real
call takes them; the table is exactly what the committed probe data gives."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from memfit._gpus import resolve_gpu
from memfit.trace._cudnn import ConvWorkspaces, _at_batch, _bound_ratios, _output_bytes, _table
from memfit.trace._tracer import trace_workload
from memfit.workload._step import Workload

ROOT = Path(__file__).parents[2]
_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _trace(model_fn, batch, mode="train", precision="fp32"):
    work = Workload(
        build_model=model_fn,
        make_batch=lambda: batch,
        loss_fn=lambda m, b: m(b).float().sum(),
        optimizer="sgd",
        precision=precision,
        mode=mode,
    )
    return trace_workload(work, resolve_gpu("h200"))


def _builder() -> Any:
    spec = importlib.util.spec_from_file_location("build", ROOT / "benchmarks/build_cudnn_table.py")
    assert spec and spec.loader
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build


# the table is built from these probe runs, merged (H200s and H100s, torch 2.11, cuDNN 9.19)
PROBES = [
    "benchmarks/results/2026-11-30-h200-estimate-accuracy/cudnn_probe.json.gz",
    "benchmarks/results/2026-11-30-h200-finder-monitor-cudnn/cudnn_probe_conv.json.gz",
    "benchmarks/results/2026-11-30-h200-finder-monitor-cudnn/cudnn_probe_lstm.json.gz",
    # EfficientNetV2-S, ViT patch embeddings, fp16 LSTMs
    "benchmarks/results/2026-12-01-h200-user-steps-compiled/cudnn/cudnn_probe_families.json.gz",
    # RegNet-Y-8GF's grouped convolutions
    "benchmarks/results/2026-12-01-h200-user-steps-compiled/cudnn/cudnn_probe_regnet.json.gz",
    # ConvNeXt-T's convolutions that see its permuted (channels-last) tensors
    "benchmarks/results/2026-12-02-h200-activation-offload/cudnn_probe_convnext_nhwc.json.gz",
    "benchmarks/results/2026-12-06-h100-zoo-convolutions/zoo-convs-probe.json.gz",
    # the zoo's 1-d, 3-d, dilated and transposed convolutions, transformers' 2-d ones, and the
    # op sweep's
    "benchmarks/results/2026-12-06-h100-conv-probes/zoo-convs-probe.json.gz",
    "benchmarks/results/2026-12-06-h100-conv-probes/op-convs-probe.json.gz",
    "benchmarks/results/2026-12-07-h100-zoo-held-out-convolutions/held-convs-probe.json.gz",
    # the convolutions of the depth, upscaling and contrastive types and the third hand-written set
    "benchmarks/results/2026-12-07-h100-new-families-convolutions/new-convs-probe.json.gz",
    # the vision-language types' and the fourth hand-written set's
    "benchmarks/results/2026-12-07-h200-vision-language-convolutions/vlm-hw4-convs-probe.json.gz",
    # LSTMs of hidden sizes 32 to 512, and at Sequencer2d's shapes (batches up to 32,768)
    "benchmarks/results/2026-12-07-h200-lstm-probes/hidden-lstm-probe.json.gz",
    "benchmarks/results/2026-12-07-h200-lstm-probes/sequencer-lstm-probe.json.gz",
    # GRUs of hidden sizes 256 and 1024, inputs once and twice the hidden size
    "benchmarks/results/2026-12-07-h100-rnn-probes/gru-probe.json.gz",
    # the object detectors' and the fifth hand-written set's convolutions
    "benchmarks/results/2026-12-07-h100-detection-handwritten-convolutions/det-hw5-convs-probe.json.gz",
    # the sixth hand-written set's and the segmentation, grounding and mask-generation types'
    "benchmarks/results/2026-12-07-h200-probes-segmentation-sixth-rnn/hw6-convs-probe.json.gz",
    "benchmarks/results/2026-12-07-h200-probes-segmentation-sixth-rnn/seg-convs-probe.json.gz",
    # LSTMs with projections (proj_size half the hidden size): one run of a file of several
    "benchmarks/results/2026-12-07-h200-probes-segmentation-sixth-rnn/rnn-probes.json.gz:proj",
]


def _probe() -> dict[str, Any]:
    build = _builder()
    merged: dict[str, Any] = build.merge([build.load(str(ROOT / path)) for path in PROBES])
    return merged


def test_the_committed_table_is_what_the_probe_gives() -> None:
    built = _builder().build(_probe())
    assert built["conv"] == _table()
    # the LSTM fits too, to the byte of the file (a zero coefficient is written 0.0, whatever
    # sign the solver left on it), and fp16 has its own (autocast runs every LSTM in fp16)
    committed = json.loads((ROOT / "src/memfit/trace/data/cudnn_sm90.json").read_text())
    built_fits = json.dumps(built["lstm_workspace"], sort_keys=True)
    assert built_fits == json.dumps(committed["lstm_workspace"], sort_keys=True)
    built_proj = json.dumps(built["lstm_proj_workspace"], sort_keys=True)
    assert built_proj == json.dumps(committed["lstm_proj_workspace"], sort_keys=True)
    assert {k.split("|")[0] for k in committed["lstm_workspace"]} == {"fp32", "bf16", "fp16"}


def test_probes_of_sm90_gpus_merge_and_others_do_not() -> None:
    build, probe = _builder(), _probe()
    assert build.build(build.merge([probe, probe]))["conv"] == _table()
    other = {**probe, "meta": {**probe["meta"], "gpu": "NVIDIA A100-SXM4-80GB"}}
    with pytest.raises(ValueError, match="cannot be merged"):
        build.merge([probe, other])
    newer = {**probe, "meta": {**probe["meta"], "cudnn": probe["meta"]["cudnn"] + 100}}
    with pytest.raises(ValueError, match="cannot be merged"):
        build.merge([probe, newer])


def test_measured_batch_sizes_are_exact_and_others_interpolated() -> None:
    by_batch = {"32": [100], "128": [400]}
    assert _at_batch(by_batch, 32) == ([100], True)
    assert _at_batch(by_batch, 64) == ([200], False)
    assert _at_batch(by_batch, 256) == ([800], False)  # beyond the probes: grows with the batch
    assert _at_batch({"32": [100], "128": [400, 8]}, 64) == ([200], False)  # nearest, scaled


def test_a_training_convolution_takes_its_workspaces_between_its_outputs() -> None:
    # ResNet-50's 3x3 convolution of 64 channels at 56x56, batch 32, fp32: measured on an H200
    conv = lambda: nn.Conv2d(64, 64, 3, padding=1, bias=False)  # noqa: E731
    x = torch.randn(32, 64, 56, 56).requires_grad_()
    trace = _trace(conv, x)
    labels = [
        (trace.infos[e.info].op, e.size)
        for e in trace.events[trace.steps_start :]
        if e.kind == "alloc" and trace.infos[e.info].phase == "step1.backward"
    ]
    entry = _table()["64,56,56,64,3,3,1,1,1,1,1|fp32"]
    out = 32 * 64 * 56 * 56 * 4
    assert labels[-4:] == [
        ("convolution_backward", out),
        ("cuDNN convolution input gradient workspace", entry["dgrad"]["32"][0]),
        ("convolution_backward", 64 * 64 * 9 * 4),
        ("cuDNN convolution weight gradient workspace", entry["wgrad"]["32"][0]),
    ]


def test_resnet50_inference_has_the_measured_stem_workspace() -> None:
    torchvision = pytest.importorskip("torchvision")
    trace = _trace(
        torchvision.models.resnet50,
        torch.randn(128, 3, 224, 224),
        mode="infer",
        precision="fp16",
    )
    workspaces = [
        e.size
        for e in trace.events
        if e.kind == "alloc" and trace.infos[e.info].op == "cuDNN convolution workspace"
    ]
    stem = _table()["3,224,224,64,7,7,2,2,3,3,1|fp16"]["fwd"]["128"]
    assert workspaces[0] == stem[0]
    assert not any("interpolated" in n for n in trace.notes)


def test_unknown_shapes_take_a_bounded_workspace_and_say_so() -> None:
    ws = ConvWorkspaces()
    x = torch.empty(8, 5, 9, 9, device="meta")
    w = torch.empty(7, 5, 3, 3, device="meta")
    ratios = _bound_ratios(ws.table)
    largest = max(8 * 5 * 9 * 9, 8 * 7 * 7 * 7) * 4  # the input's bytes
    assert ws.forward((x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)) == [
        round(largest * ratios["dense", "fwd"])
    ]
    assert 1.5 < ratios["dense", "fwd"] < 3 and 1.5 < ratios["dense", "wgrad"] < 4
    (note,) = ws.notes()
    assert note.startswith("1 convolution shapes have no measured cuDNN workspace: each is given")


def test_the_bound_covers_most_of_the_tables_large_convolutions() -> None:
    # the bound is read off the table: BOUND_SHARE of its large convolutions need no more
    ws = ConvWorkspaces()
    covered = total = 0
    for key, phases in _table().items():
        fields, dtype, *tags = key.split("|")
        if len(fields.split(",")) != 11 or set(tags) - {"nhwc"}:
            continue  # 3-d, dilated, transposed: not what the bound is read off
        c, h, w, k, kh, kw, sh, sw, ph, pw, g = (int(f) for f in fields.split(","))
        x = torch.empty(64, c, h, w, device="meta", dtype=_DTYPE[dtype])
        weight = torch.empty(k, c // g, kh, kw, device="meta", dtype=x.dtype)
        shape = (x, weight, [sh, sw], [ph, pw], [1, 1], False)
        largest = max(x.numel() * x.element_size(), _output_bytes(*shape))
        if largest < 16 * 2**20 or not phases["fwd"].get("64"):
            continue
        (bound,) = ws._bounded(shape, g, ["fwd"], "probe") or (0,)
        total += 1
        covered += sum(phases["fwd"]["64"]) <= bound
    assert total > 50 and covered / total >= 0.85  # 95% over every phase, batch and dtype


def test_transposed_dilated_and_3d_convolutions_unprobed_are_bounded_under_their_own_keys() -> None:
    ws = ConvWorkspaces()
    x3 = torch.empty(2, 4, 8, 16, 16, device="meta")
    w3 = torch.empty(8, 4, 3, 3, 3, device="meta")
    fwd3 = ws.forward((x3, w3, None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1))
    assert fwd3 and fwd3[0] >= 2 * 8 * 8 * 16 * 16 * 4  # about twice the output's bytes
    x = torch.empty(2, 8, 16, 16, device="meta")
    wt = torch.empty(8, 4, 2, 2, device="meta")  # transposed: (in, out, ...)
    fwd_t = ws.forward((x, wt, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1))
    assert fwd_t and fwd_t[0] >= 2 * 4 * 32 * 32 * 4
    wd = torch.empty(8, 8, 3, 3, device="meta")
    grad = torch.empty(2, 8, 12, 12, device="meta")
    back = ws.backward((grad, x, wd, None, [1, 1], [0, 0], [2, 2], False, [0, 0], 1, [1, 1, 0]))
    assert back[0] and back[1] and 2 not in back
    assert ws.unknown == {
        "4,8,16,16,8,3,3,3,1,1,1,1,1,1,1",  # 3-d: three of each
        "8,16,16,4,2,2,2,2,0,0,1|tr",  # transposed: the output's 4 channels
        "8,16,16,8,3,3,1,1,0,0,1|dil=2,2",
    }


def test_a_keys_parameters_are_those_cudnn_sees() -> None:
    # one value for every dimension, as ATen expands it; a 1-d convolution as 2-d of height 1
    # with its parameters' new first dimension neutral; a transposed one's output padding
    from memfit.trace._cudnn import _key

    x = torch.empty(2, 4, 8, 8, 8, device="meta", dtype=torch.bfloat16)
    w = torch.empty(6, 4, 3, 3, 3, device="meta", dtype=torch.bfloat16)
    assert _key(x, w, [2], [1], 1, [1], False, [0]) == "4,8,8,8,6,3,3,3,2,2,2,1,1,1,1|bf16"
    x1 = torch.empty(2, 4, 32, device="meta")
    w1 = torch.empty(4, 3, 5, device="meta")  # transposed: (in, out / groups, kL)
    assert _key(x1, w1, [2], [1], 1, [3], True, [1]) == (
        "4,1,32,3,1,5,1,2,0,1,1|fp32|dil=1,3|tr=0,1"
    )
    assert _key(x1, w1, [2], [1], 1, [1], True, [0]).endswith("|fp32|tr")


def test_a_1d_convolution_is_looked_up_as_the_2d_one_cudnn_runs() -> None:
    # a pointwise 1-d convolution over one position is the table's 1x1 2-d one of height 1
    ws = ConvWorkspaces()
    x = torch.empty(128, 10, 1, device="meta", dtype=torch.bfloat16)
    w = torch.empty(240, 10, 1, device="meta", dtype=torch.bfloat16)
    measured = _table()["10,1,1,240,1,1,1,1,0,0,1|bf16"]["fwd"]["128"]
    assert measured and ws.forward((x, w, None, [1], [0], [1], False, [0], 1)) == measured
    assert not ws.unknown
    # one the table does not hold is bounded, named by its 2-d key
    x = torch.empty(2, 4, 8, device="meta")
    w = torch.empty(3, 4, 3, device="meta")
    assert ws.forward((x, w, None, [1], [0], [1], False, [0], 1))
    assert ws.unknown == {"4,1,8,3,1,3,1,1,0,0,1"}


def test_a_channels_last_convolution_has_its_own_measured_workspaces() -> None:
    # cuDNN picks other engines in NHWC (ConvNeXt after its stem's LayerNorm2d): the NCHW probe
    # says nothing about them, so the table keys them apart (|nhwc, probed separately);
    # a channels-last shape the probes never ran is bounded, with a note
    from memfit.trace._cudnn import ConvWorkspaces

    w = torch.empty(192, 96, 2, 2, device="meta")
    x = torch.empty(64, 96, 56, 56, device="meta")
    args = (x, w, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1)
    nchw, nhwc = ConvWorkspaces(), ConvWorkspaces()
    cl = (x.to(memory_format=torch.channels_last), *args[1:])
    assert nchw.forward(args) == [77365264] and not nchw.unknown  # ConvNeXt-T's first (fp32)
    assert nhwc.forward(cl) == [294912, 131] and not nhwc.unknown  # downsample, either way
    other = ConvWorkspaces()
    x2 = torch.empty(64, 96, 50, 50, device="meta").to(memory_format=torch.channels_last)
    assert other.forward((x2, *args[1:])) != [] and other.unknown  # bounded
    assert any("no measured cuDNN workspace" in n for n in other.notes())


def test_a_channels_last_bias_gradient_takes_its_reductions_scratch() -> None:
    # measured on the H200: the bias gradient of ConvNeXt's depthwise 7x7 (768 channels, b64,
    # NHWC) sums through 19.27 MB of scratch, after the weight gradient's 77 MB workspace
    from memfit.trace._cudnn import ConvWorkspaces

    x = torch.empty(64, 768, 7, 7, device="meta").to(memory_format=torch.channels_last)
    w = torch.empty(768, 1, 7, 7, device="meta", dtype=torch.bfloat16)
    x = x.to(torch.bfloat16)
    grad = torch.empty_like(x)
    args = (grad, x, w, [768], [1, 1], [3, 3], [1, 1], False, [0, 0], 768, [True, True, True])
    assert ConvWorkspaces().backward(args) == {0: [], 1: [77070336], 2: [19267584, 24]}


def test_a_patch_embeddings_bound_is_read_off_patch_embeddings() -> None:
    # a kernel that steps by its own size takes more than most dense convolutions: CLIP's
    # 32x32 patches of 224x224 bf16 images took 2.76 times the input on an H100 (torch 2.11)
    ws = ConvWorkspaces()
    x = torch.empty(1024, 3, 224, 224, device="meta", dtype=torch.bfloat16)
    w = torch.empty(256, 3, 32, 32, device="meta", dtype=torch.bfloat16)
    (bound,) = ws.forward((x, w, None, [32, 32], [0, 0], [1, 1], False, [0, 0], 1))
    ratios = _bound_ratios(ws.table)
    assert ratios["patch", "fwd"] > ratios["dense", "fwd"]
    assert bound >= 851_968_016  # what cuDNN took
    # padded or overlapping kernels stay dense
    (dense,) = ws.forward((x, w, None, [16, 16], [0, 0], [1, 1], False, [0, 0], 1))
    assert dense == round(x.numel() * 2 * ratios["dense", "fwd"])


def test_probed_3d_and_transposed_convolutions_take_their_measured_workspaces() -> None:
    # H100 probes, torch 2.11: torchvision R3D-18's stem at batch 128 in bf16 takes no
    # forward workspace and 1.24 GB for its weight gradient; a 2x2 transposed convolution
    # (Mask R-CNN's mask head, 256 channels) its own, keyed |tr
    ws = ConvWorkspaces()
    x = torch.empty(128, 3, 16, 112, 112, device="meta", dtype=torch.bfloat16)
    w = torch.empty(64, 3, 3, 7, 7, device="meta", dtype=torch.bfloat16)
    args = (x, w, None, [1, 2, 2], [1, 3, 3], [1, 1, 1], False, [0, 0, 0], 1)
    assert ws.forward(args) == []
    grad = torch.empty(128, 64, 16, 56, 56, device="meta", dtype=torch.bfloat16)
    back = ws.backward((grad, *args[:2], None, *args[3:], [False, True, False]))
    assert back == {1: [1240749083]}
    xt = torch.empty(16032, 256, 14, 14, device="meta", dtype=torch.bfloat16)
    wt = torch.empty(256, 256, 2, 2, device="meta", dtype=torch.bfloat16)
    forward_t = ws.forward((xt, wt, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1))
    assert forward_t == [5368854675] and not ws.unknown


def test_an_unprobed_3d_patch_embedding_takes_the_patch_bound_in_every_phase() -> None:
    # a video model's 3-d patch embedding (kernel == stride, no padding) the table lacks: each
    # of forward, input and weight gradient is given the 2-d patch ratio of its larger tensor
    # (none would be the dangerous side: an H200 probe of Qwen2-VL's took 2.7 times its input
    # for the input gradient)
    ws = ConvWorkspaces()
    x = torch.empty(4096, 3, 2, 14, 14, device="meta", dtype=torch.bfloat16)
    w = torch.empty(320, 3, 2, 14, 14, device="meta", dtype=torch.bfloat16)
    args = (x, w, None, [2, 14, 14], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1)
    grad = torch.empty(4096, 320, 1, 1, 1, device="meta", dtype=torch.bfloat16)
    fwd = ws.forward(args)
    back = ws.backward((grad, x, w, None, *args[3:], [True, True, False]))
    ratios = _bound_ratios(ws.table)
    largest = x.numel() * 2
    assert fwd == [round(largest * ratios["patch", "fwd"])]
    assert back == {
        0: [round(largest * ratios["patch", "dgrad"])],
        1: [round(largest * ratios["patch", "wgrad"])],
    }
    assert ws.unknown == {"3,2,14,14,320,2,14,14,2,14,14,0,0,0,1"}
