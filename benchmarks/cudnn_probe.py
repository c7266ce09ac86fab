"""Record what cuDNN takes from the caching allocator for convolutions and RNNs on a real GPU.

The data ``build_cudnn_table.py`` fits memfit's cuDNN workspaces and RNN reserve spaces to
(``memfit/trace/_cudnn.py``, ``memfit/trace/_rnn.py``). For each configuration, the allocator
trace of one forward (and backward, in training) is kept as (action, size) pairs.

    PYTHONPATH=src python benchmarks/cudnn_probe.py OUT.json [--conv-batches 1 8 32 64 128 256]
        [--models resnet50 resnet18 ...] [--lstm-layers 1 2 3 4] [--lstm-infer]
        [--rnn-kinds lstm gru] [--lstm-inputs 0.5 2] [--packed]

``--models`` with no name probes no convolution, ``--lstm-hidden`` with none no RNN. An LSTM
under CUDA autocast (bf16 included) runs cuDNN in fp16 (memfit/trace/_rnn.py), so
``--lstm-dtypes fp16`` is what bf16-mixed LSTMs need. ``--lstm-inputs`` gives input sizes as
multiples of the hidden size; ``--packed`` probes each configuration on a packed batch too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
import time
from dataclasses import dataclass

import torch
from torch import nn

from memfit.trace._conv_probe import DTYPES, probe_conv, record

CNNS = {
    "resnet50": "tv:resnet50",
    "convnext_tiny": "timm:convnext_tiny",
    "efficientnet_b0": "timm:efficientnet_b0",
    "resnet18": "tv:resnet18",
    "resnet101": "tv:resnet101",
    "mobilenet_v3_large": "tv:mobilenet_v3_large",
    "vgg16": "tv:vgg16",
    "regnety_016": "timm:regnety_016",
    "efficientnet_v2_s": "tv:efficientnet_v2_s",  # fused MBConv 3x3s, SE 1x1s
    # ViT patch embeddings: ViT-B/16, CLIP ViT-B/32's (same shape; torchvision's has
    # a bias, CLIP's not: the key and the workspaces do not depend on it), timm's ViT-S/16
    "vit_b_16": "tv:vit_b_16",
    "vit_b_32": "tv:vit_b_32",
    "vit_small": "timm:vit_small_patch16_224",
    # RegNet-Y-8GF: grouped 3x3s (group width 56), SE 1x1s, 33 shapes
    # no other model here has
    "regnet_y_8gf": "tv:regnet_y_8gf",
}


def _build(spec: str) -> nn.Module:
    import timm
    import torchvision

    kind, name = spec.split(":")
    return torchvision.models.get_model(name) if kind == "tv" else timm.create_model(name)


def conv_configs(names: list[str]) -> list[dict]:
    seen: dict[tuple, dict] = {}
    models = {name: _build(CNNS[name]) for name in names}
    for name, model in models.items():
        shapes: list[tuple] = []

        def hook(mod: nn.Module, args: tuple, out: torch.Tensor, shapes=shapes) -> None:
            x = args[0]
            # a permuted input (timm's ConvNeXt hands its depthwise convolutions its MLP's
            # NHWC output): cuDNN runs channels-last engines, with workspaces of their own
            nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
            shapes.append((mod, (*x.shape[1:], nhwc)))

        handles = [
            m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)
        ]
        with torch.no_grad():
            model(torch.randn(1, 3, 224, 224))
        for h in handles:
            h.remove()
        for mod, (c, h, w, nhwc) in shapes:
            key = (
                c,
                h,
                w,
                nhwc,
                mod.out_channels,
                mod.kernel_size,
                mod.stride,
                mod.padding,
                mod.groups,
                mod.bias is not None,
            )
            seen.setdefault(
                key,
                {
                    "model": name,
                    "c": c,
                    "h": h,
                    "w": w,
                    "k": mod.out_channels,
                    "kernel": list(mod.kernel_size),
                    "stride": list(mod.stride),
                    "padding": list(mod.padding),
                    "groups": mod.groups,
                    "bias": mod.bias is not None,
                    **({"nhwc": True} if nhwc else {}),
                },
            )
    return list(seen.values())


RNNS = {"lstm": nn.LSTM, "gru": nn.GRU}


def probe_lstm(
    hidden: int, layers: int, batch: int, seq: int, dtype: str, bidir: bool, train: bool = True
) -> dict:
    return probe_rnn(RnnCase("lstm", hidden, hidden, layers, batch, seq, dtype, bidir, train))


@dataclass(frozen=True)
class RnnCase:
    """One cuDNN RNN call to probe; ``packed`` runs it on a packed batch whose lengths fall
    evenly from ``seq`` to a quarter of it (sorted, as ``pack_padded_sequence`` sorts them),
    or with ``steep``, one sequence of ``seq`` and the others an eighth of it."""

    kind: str
    input: int
    hidden: int
    layers: int
    batch: int
    seq: int
    dtype: str
    bidir: bool
    train: bool = True
    packed: bool = False
    steep: bool = False
    dropout: float = 0.0  # between layers, in training
    proj: int = 0  # an LSTM's projection size (0: none)

    def lengths(self) -> list[int]:
        if self.steep:
            return [self.seq] + [max(1, self.seq // 8)] * (self.batch - 1)
        low = max(1, self.seq // 4)
        steps = max(1, self.batch - 1)
        return [self.seq - (self.seq - low) * i // steps for i in range(self.batch)]


def probe_rnn(case: RnnCase) -> dict:
    from torch.nn.utils.rnn import pack_padded_sequence

    rnn = (
        RNNS[case.kind](
            case.input,
            case.hidden,
            num_layers=case.layers,
            batch_first=True,
            bidirectional=case.bidir,
            dropout=case.dropout if case.layers > 1 else 0.0,
            **({"proj_size": case.proj} if case.proj else {}),
        )
        .cuda()
        .to(DTYPES[case.dtype])
    )
    shape = (case.batch, case.seq, case.input)
    x = torch.randn(*shape, device="cuda", dtype=DTYPES[case.dtype], requires_grad=case.train)
    rnn.train(case.train)

    def forward() -> torch.Tensor:
        if not case.packed:
            return rnn(x)[0]
        lengths = torch.tensor(case.lengths())
        return rnn(pack_padded_sequence(x, lengths, batch_first=True))[0].data

    def run() -> None:
        if not case.train:
            with torch.no_grad():
                forward()
            return
        out = forward()
        out.backward(torch.ones_like(out))

    run()
    rnn.zero_grad(set_to_none=True)
    x.grad = None
    row = {
        "kind": case.kind,
        "input": case.input,
        "hidden": case.hidden,
        "layers": case.layers,
        "batch": case.batch,
        "seq": case.seq,
        "dtype": case.dtype,
        "bidirectional": case.bidir,
        "train": case.train,
    }
    if case.packed:
        row["lengths"] = case.lengths()
        row["steep"] = case.steep
    if case.dropout:
        row["dropout"] = case.dropout
    if case.proj:
        row["proj"] = case.proj
    return {**row, "trace": record(run)}


def probe_meta() -> dict:
    """The GPU, the versions and the command a probe document was made with."""
    return {
        "date": dt.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "benchmark": torch.backends.cudnn.benchmark,
        "command": " ".join(sys.argv),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--models", nargs="*", default=list(CNNS), choices=list(CNNS))
    parser.add_argument("--conv-batches", nargs="*", type=int, default=[32, 128])
    parser.add_argument("--conv-dtypes", nargs="*", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--lstm-hidden", nargs="*", type=int, default=[256, 1024])
    parser.add_argument("--lstm-layers", nargs="*", type=int, default=[1, 2])
    parser.add_argument("--lstm-batches", nargs="*", type=int, default=[16, 64])
    parser.add_argument("--lstm-seqs", nargs="*", type=int, default=[64, 256])
    parser.add_argument("--lstm-dtypes", nargs="*", default=["fp32", "bf16"], choices=list(DTYPES))
    parser.add_argument("--lstm-infer", action="store_true", help="also probe inference calls")
    parser.add_argument(
        "--lstm-inputs",
        nargs="*",
        type=float,
        default=[1.0],
        help="input sizes, as multiples of the hidden size",
    )
    parser.add_argument("--rnn-kinds", nargs="*", default=["lstm"], choices=list(RNNS))
    parser.add_argument("--packed", action="store_true", help="also probe packed batches")
    parser.add_argument(
        "--packed-only", action="store_true", help="probe packed batches, not padded ones"
    )
    parser.add_argument(
        "--steep", action="store_true", help="packed lengths: one long sequence, the rest short"
    )
    parser.add_argument(
        "--rnn-dropout", type=float, default=0.0, help="dropout between the layers (training)"
    )
    parser.add_argument(
        "--lstm-proj", type=float, default=0.0, help="LSTM projection, a fraction of the hidden"
    )
    args = parser.parse_args()
    out = {
        "meta": probe_meta(),
        "conv": [],
        "lstm": [],
    }
    saved = time.monotonic()

    def save(every: float = 0.0) -> None:
        """Write what is probed so far (at most every ``every`` seconds): a time limit then
        costs the probes after the last write only."""
        nonlocal saved
        if time.monotonic() - saved >= every:
            with open(args.out, "w") as fh:
                json.dump(out, fh)
            saved = time.monotonic()

    for cfg in conv_configs(args.models):
        for batch in args.conv_batches:
            for dtype in args.conv_dtypes:
                for train in (False, True):
                    out["conv"].append(probe_conv(cfg, batch, dtype, train))
        torch.cuda.empty_cache()
        save(every=20.0)
    modes = (True, False) if args.lstm_infer else (True,)
    for kind, scale, hidden, layers, batch, seq, dtype, bidir, train, packed in itertools.product(
        args.rnn_kinds,
        args.lstm_inputs,
        args.lstm_hidden,
        args.lstm_layers,
        args.lstm_batches,
        args.lstm_seqs,
        args.lstm_dtypes,
        (False, True),
        modes,
        (True,) if args.packed_only else (False, True) if args.packed else (False,),
    ):
        size = max(1, round(hidden * scale))
        case = RnnCase(
            kind,
            size,
            hidden,
            layers,
            batch,
            seq,
            dtype,
            bidir,
            train,
            packed,
            args.steep,
            args.rnn_dropout,
            round(hidden * args.lstm_proj),
        )
        out["lstm"].append(probe_rnn(case))
        save(every=20.0)
    save()
    print(f"{len(out['conv'])} convolution and {len(out['lstm'])} RNN probes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
