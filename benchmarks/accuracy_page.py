"""docs/accuracy.md, generated from the committed results: memfit's estimates against the GPU.

    python benchmarks/accuracy_page.py            # writes docs/accuracy.md
    python benchmarks/accuracy_page.py --check    # exit 1 if docs/accuracy.md is not what it writes

Every number on the page is read from a file under ``benchmarks/results/`` (JSON, gzipped JSON,
JSON lines, or the one-line ``RESULT {...}`` file a measurement prints); the errors are computed
from the bytes read. Each source is declared once below, in ``SOURCES``: its path, its topic and
the reader of its format. The list is in the order the files were committed, so where one
workload has several estimates or measurements the last one declared is the latest, and the page
names the file each number came from. Older files are declared too, so that the choice of the
latest is made here and not by the reader. A prediction is an estimate whose file was committed
before the measurement it is compared with (checked in the repository's history when it was
declared), unless its row says the workload was run before (``held_out`` false).

The formats and their readers are in ``accuracy_formats.py``, the tables in
``accuracy_tables.py``; the zoo sweep's files (``zoo.py``) have their readers and their section
in ``accuracy_zoo.py``.
"""

from __future__ import annotations

import argparse
import sys

from accuracy_formats import (
    ROOT,
    MissingResultError,
    Reader,
    Source,
    accuracy,
    cases,
    estimates_of,
    finders,
    measured,
    plans,
    predictions,
    races,
    read_all,
    reestimated,
)
from accuracy_ops import op_sweep_summary
from accuracy_tables import render
from accuracy_zoo import (
    held_out_estimates,
    held_out_peaks,
    zoo_estimates,
    zoo_fresh,
    zoo_measured,
    zoo_models,
)

PAGE = ROOT / "docs" / "accuracy.md"


# -- the sources, in the order they were committed ---------------------------------------------

# Versions the GPU host's files do not record, as their folders' READMEs name them.
GPU_HOST = {"transformers": "5.17.0", "timm": "1.0.29", "torchvision": "0.26.0"}
HOST_211 = {"torch": "2.11.0+cu130", "transformers": "5.17.0"}
CPU_211 = {"torch": "2.11.0", "transformers": "5.17.0", "timm": "1.0.29", "deepspeed": "0.19.8"}
H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"
COLD, WARM = "inductor cache cold", "inductor cache warm"
T5_524 = "transformers 5.24.0"
APPLY, LOOP = "through memfit.apply", "in memfit's loop"
PARALLELIZE = {
    "fsdp2-4-gpt2-fp32-b4-s512-kept": "gpt2, batch 4 x 512, fp32, FSDP2 rank 0 of 4, "
    "blocks not resharded after forward",
    "fsdp2-4-gpt2-bf16mixed-b8-s1024-bf16reduce": "gpt2, batch 8 x 1024, bf16 all-gathers and bf16 "
    "reductions, FSDP2 rank 0 of 4",
    "ddp1-gpt2-fp32-b4-s512-views": "gpt2, batch 4 x 512, fp32, DDP rank 0 of 1, "
    "gradient_as_bucket_view=True",
}

ACCURACY = "2026-11-30-h200-estimate-accuracy"
ATTENTION = "2026-11-30-h200-attention-finders-heldout"
FAMILIES = "2026-12-01-h200-heldout-families"
USER_STEPS = "2026-12-01-h200-user-steps-compiled"
COMPILED = "2026-12-01-h200-compiled-accumulation-step-times"
IN_BACKWARD = "2026-12-02-h200-in-backward-8bit"
BUDGET = "2026-12-02-h200-compile-budget-depthwise"
OFFLOAD = "2026-12-02-h200-activation-offload"
FSDP2 = "2026-12-02-h200-fsdp2-ranks"
ZERO = "2026-12-02-cpu-zero-predictions"
INPUTS = "2026-12-02-h200-offloaded-inputs-ddp-views"
INPUTS_CPU = "2026-12-02-cpu-offloaded-inputs-predictions"
ZOO = "2026-12-06-cpu-zoo-sweep"
ZOO_H100 = "2026-12-06-h100-zoo-sweep"
ZOO_REPREDICTED = "2026-12-06-cpu-zoo-repredicted"
ZOO_CONV_TABLE = "2026-12-06-cpu-zoo-after-conv-table"
ZOO_OP_FIXES = "2026-12-06-cpu-zoo-after-op-fixes"
ZOO_OP_FIXES_2 = "2026-12-06-cpu-zoo-after-second-op-fixes"
ZOO_CONV_PROBES = "2026-12-06-cpu-zoo-after-conv-probes"
ZOO_NORMS = "2026-12-07-cpu-zoo-after-norm-layouts"
ZOO_ACCUMULATORS = "2026-12-07-cpu-zoo-after-attention-accumulators"
ZOO_BATCH_NORM = "2026-12-07-cpu-zoo-after-cudnn-batch-norm"
ZOO_AUTOCAST = "2026-12-07-cpu-zoo-after-autocast-cache"
ZOO_LSTM = "2026-12-07-cpu-zoo-after-lstm-regimes"
ZOO_ROUTING = "2026-12-07-cpu-zoo-after-routing-gru"
ZOO_FRESH = (
    "2026-12-06-h100-zoo-recheck",
    "2026-12-06-h100-zoo-fresh-processes",
    "2026-12-07-h100-zoo-fresh-processes",
)
HANDWRITTEN = "2026-12-06-h100-handwritten-models"
HANDWRITTEN_2 = (
    "2026-12-07-h100-handwritten-models-second",
    "2026-12-07-h200-handwritten-models-second",
)
HOST_OPTIMIZER = (
    "2026-12-07-cpu-host-optimizer-predictions",
    "2026-12-07-h200-host-optimizer-proof",
)
HANDWRITTEN_3 = (
    "2026-12-07-cpu-handwritten-models-third",
    "2026-12-07-h100-handwritten-models-third",
)
ZOO_HELD = ("2026-12-07-cpu-zoo-held-out", "2026-12-07-h100-zoo-held-out")
ZOO_HELD_2 = (
    "2026-12-07-cpu-zoo-held-out-depth-contrastive",
    "2026-12-07-h100-zoo-new-families",
)
ZOO_HELD_3 = (
    "2026-12-07-cpu-zoo-held-out-vision-language",
    "2026-12-07-h200-zoo-vision-language",
)
HANDWRITTEN_4 = (
    "2026-12-07-cpu-handwritten-models-fourth",
    "2026-12-07-h200-handwritten-models-fourth",
)
# predicted once, measured, then estimated again with their convolutions probed (not predictions)
ZOO_HELD_4 = (
    "2026-12-07-cpu-zoo-held-out-object-detection",
    "2026-12-07-h100-zoo-object-detection",
)
HANDWRITTEN_5 = (
    "2026-12-07-cpu-handwritten-models-fifth",
    "2026-12-07-h100-handwritten-models-fifth",
)
AFTER_PROBE_5 = "2026-12-07-cpu-detection-handwritten-after-probe"
AFTER_FIXES_5 = "2026-12-07-cpu-handwritten-after-packed-einsum"
HANDWRITTEN_6 = (
    "2026-12-07-cpu-handwritten-models-sixth",
    "2026-12-08-h100-handwritten-int8-serving",
)
INT8 = "2026-12-07-cpu-int8-lora-predictions"
SEQ2SEQ = "2026-12-07-cpu-lstm-seq2seq-seeded"
ZOO_HELD_5 = "2026-12-07-cpu-zoo-held-out-segmentation-grounding"
AFTER_MEASURED_6 = "2026-12-08-cpu-double-backward"
LORA = ("2026-12-07-cpu-lora-predictions", "2026-12-07-cpu-qlora-predictions")
LORA_H200 = "2026-12-07-h200-lora-qlora"
OP_SWEEP = "2026-12-06-h100-op-sweep"


def _probed_first(folders: tuple[str, str], stem: str, read: Reader, gpu: str = "") -> list[Source]:
    """A held-out set predicted twice before it was measured (with the cuDNN table as it was,
    then with the set's convolutions probed as ops first), and its measurements: zoo types'
    peaks (``gpu`` given) or hand-written models' ``measured.json``."""
    cpu, device = folders
    ext = "jsonl" if gpu else "json"
    topic = "families" if gpu else "handwritten"
    after = Source(f"{cpu}/{stem}-after-conv-probe.{ext}", topic, read)
    if gpu:
        peaks = Source(f"{device}/peaks.jsonl", topic, held_out_peaks, gpu=gpu, versions=HOST_211)
    else:
        peaks = Source(f"{device}/measured.json", topic, measured, versions=GPU_HOST)
    return [Source(f"{cpu}/{stem}.{ext}", topic, read, prediction=True), after, peaks]


SOURCES: list[Source] = [
    Source(f"{ACCURACY}/measured-part1.json", "validation", measured, versions=GPU_HOST),
    Source(f"{ACCURACY}/measured-part2.json", "validation", measured, versions=GPU_HOST),
    Source(f"{ACCURACY}/measured-part3.json", "validation", measured, versions=GPU_HOST),
    Source(f"{ACCURACY}/measured-part4.json", "validation", measured, versions=GPU_HOST),
    Source(
        f"{ACCURACY}/current-transformers-5.24/accuracy.json",
        None,
        accuracy,
        prediction=True,
        variant=T5_524,
    ),
    Source(f"{ATTENTION}/finders/batch_size.json", "finder", finders),
    Source(f"{ATTENTION}/heldout/predictions.json", "validation", predictions, prediction=True),
    Source(f"{ACCURACY}/measured-part5.json", "validation", measured, versions=GPU_HOST),
    Source(
        f"{ATTENTION}/heldout/predictions-padded.json", "validation", predictions, prediction=True
    ),
    Source(f"{ACCURACY}/measured-part6.json", "validation", measured, versions=GPU_HOST),
    Source(
        f"{ATTENTION}/t5-transformers-5.24/measured.json",
        "libraries",
        measured,
        variant=T5_524,
        versions={**GPU_HOST, "transformers": "5.24.0"},
    ),
    Source(f"{ATTENTION}/t5-transformers-5.24/accuracy.json", None, accuracy, variant=T5_524),
    Source(f"{FAMILIES}/heldout/predictions-local.json", "families", predictions, prediction=True),
    Source(f"{FAMILIES}/heldout/measured.json", "families", measured, versions=GPU_HOST),
    Source(f"{FAMILIES}/heldout/estimates-after-local.json", None, predictions),
    Source(f"{HANDWRITTEN}/predictions.json", "handwritten", predictions, prediction=True),
    Source(f"{HANDWRITTEN}/measured.json", "handwritten", measured, versions=GPU_HOST),
    Source(f"{HANDWRITTEN}/estimates-after.json", None, estimates_of(), versions=CPU_211),
    Source(
        f"{HANDWRITTEN}/estimates-after-conv-probes.json", None, estimates_of(), versions=CPU_211
    ),
    Source(
        f"{HANDWRITTEN}/estimates-after-complex-abs.json", None, estimates_of(), versions=CPU_211
    ),
    Source(f"{HANDWRITTEN_2[0]}/predictions.json", "handwritten", predictions, prediction=True),
    Source(f"{HANDWRITTEN_2[1]}/measured.json", "handwritten", measured, versions=GPU_HOST),
    Source(f"{HOST_OPTIMIZER[0]}/predictions.json", "techniques", predictions, prediction=True),
    Source(f"{HOST_OPTIMIZER[1]}/measured.json", "techniques", measured, versions=GPU_HOST),
    *(
        Source(f"{folder}/predictions.json", "techniques", predictions, prediction=True)
        for folder in LORA
    ),
    Source(f"{LORA_H200}/measured.json", "techniques", measured, versions=GPU_HOST),
    Source(
        f"{FAMILIES}/heldout-steps/predictions-local.json", "steps", predictions, prediction=True
    ),
    Source(f"{USER_STEPS}/heldout-steps/predictions-host.json", None, predictions),
    Source(f"{USER_STEPS}/heldout-steps/measured.json", "steps", measured),
    Source(
        f"{USER_STEPS}/heldout-compiled/predictions-local.json",
        "compiled",
        predictions,
        prediction=True,
    ),
    Source(f"{USER_STEPS}/heldout-compiled/predictions-host.json", None, predictions),
    Source(f"{USER_STEPS}/heldout-compiled/measured.json", "compiled", measured, variant=COLD),
    Source(f"{USER_STEPS}/heldout-compiled/predictions-host-after.json", None, predictions),
    Source(f"{USER_STEPS}/heldout-compiled/predictions-host-llama.json", None, predictions),
    Source(
        f"{COMPILED}/heldout-compiled/predictions-local.json",
        "compiled",
        predictions,
        prediction=True,
    ),
    Source(
        f"{COMPILED}/heldout-compiled/predictions-host-versions.json",
        None,
        predictions,
        prediction=True,
    ),
    Source(f"{COMPILED}/heldout-compiled/measured.json", "compiled", measured, variant=COLD),
    Source(
        f"{COMPILED}/heldout-accumulation/predictions-local.json",
        "settings",
        predictions,
        prediction=True,
    ),
    Source(
        f"{COMPILED}/heldout-accumulation/predictions-host-versions.json",
        None,
        predictions,
        prediction=True,
    ),
    Source(f"{COMPILED}/heldout-accumulation/measured.json", "settings", measured),
    Source(
        f"{COMPILED}/heldout-selective/predictions-local.json",
        "settings",
        predictions,
        prediction=True,
    ),
    Source(
        f"{COMPILED}/heldout-selective/predictions-host-versions.json",
        None,
        predictions,
        prediction=True,
    ),
    Source(f"{COMPILED}/heldout-selective/measured.json", "settings", measured),
    Source(
        f"{COMPILED}/heldout-compiled/cold-warm/measured-cold.json",
        "compiled",
        measured,
        variant=COLD,
    ),
    Source(
        f"{COMPILED}/heldout-compiled/cold-warm/measured-warm.json",
        "compiled",
        measured,
        variant=WARM,
    ),
    Source(f"{COMPILED}/heldout-compiled/predictions-host-versions-after.json", None, predictions),
    Source(f"{IN_BACKWARD}/predictions-in-backward.json", "optimizer", predictions),
    Source(f"{IN_BACKWARD}/measured-in-backward.json", "optimizer", measured),
    Source(f"{IN_BACKWARD}/predictions-8bit.json", "optimizer", predictions, prediction=True),
    Source(f"{IN_BACKWARD}/measured-8bit.json", "optimizer", measured),
    Source(f"{BUDGET}/budget/predictions.json", "compiled", predictions, prediction=True),
    Source(f"{BUDGET}/budget/measured.json", "compiled", measured),
    Source(f"{BUDGET}/budget-0.5-gpu/result.txt", "compiled", measured),
    Source(f"{BUDGET}/budget/estimates-after-cudnn-workspace.json", None, predictions),
    Source(f"{BUDGET}/budget/estimates-after-first-run-variants.json", None, predictions),
    Source(f"{OFFLOAD}/predictions-offload.json", "offload", predictions, prediction=True),
    Source(f"{OFFLOAD}/predictions-offload-2.json", "offload", predictions, prediction=True),
    Source(f"{OFFLOAD}/offload-memory-2/measured.json", "offload", measured),
    Source(
        f"{OFFLOAD}/predictions-offload-apply.json",
        "offload",
        cases,
        prediction=True,
        variant=APPLY,
        versions=HOST_211,
    ),
    Source(f"{OFFLOAD}/convnext-memory/measured.json", "offload", measured),
    Source(f"{OFFLOAD}/convnext-trace/measured.json", "offload", measured),
    Source(
        f"{OFFLOAD}/offload-apply.json",
        "offload",
        cases,
        variant=APPLY,
        versions=HOST_211,
        gpu=H200,
    ),
    Source(f"{OFFLOAD}/predictions-ddp1.json", "parallel", predictions, prediction=True),
    Source(f"{OFFLOAD}/ddp1/measured.json", "parallel", measured),
    Source(f"{FSDP2}/predictions_fsdp2.json", "parallel", predictions, prediction=True),
    Source(f"{FSDP2}/measured_fsdp2.json", "parallel", measured, note="autocast over FSDP2"),
    Source(f"{FSDP2}/predictions_fsdp2_mp.json", "parallel", predictions, prediction=True),
    Source(
        f"{FSDP2}/measured_fsdp2_mp.json",
        "parallel",
        measured,
        note="FSDP2's mixed-precision policy",
    ),
    Source(f"{FSDP2}/predictions_parallelize.json", "parallel", predictions, prediction=True),
    Source(f"{FSDP2}/measured_parallelize.json", "parallel", measured, workloads=PARALLELIZE),
    Source(f"{ZERO}/predictions-zero.json", "parallel", predictions, prediction=True),
    Source("2026-12-02-h200-zero-frameworks/zero/measured.json", "parallel", measured),
    Source(f"{ZERO}/predictions-zero-2.json", "parallel", predictions, prediction=True),
    Source(f"{ZERO}/estimates-zero-after-fixes.json", None, predictions),
    Source("2026-12-02-h200-zero-frameworks/zero2/measured.json", "parallel", measured),
    Source(
        f"{INPUTS_CPU}/offload_checkpoints_predicted.json",
        "offload",
        cases,
        prediction=True,
        variant=APPLY,
        versions=HOST_211,
    ),
    *(
        Source(
            f"{INPUTS}/{name}.json",
            "offload",
            cases,
            variant=variant,
            gpu=H200,
            versions={**HOST_211, "timm": "1.0.29", "torchvision": "0.26.0+cu130"},
        )
        for name, variant in (
            ("call1-offload_checkpoints", APPLY),
            ("call2-apply_traced", APPLY),
            ("call2-loop_traced", LOOP),
            ("call3-capped", APPLY),
            ("call3-uncapped", APPLY),
            ("call4-emptied", APPLY),
        )
    ),
    Source(
        f"{INPUTS_CPU}/trace-changes.json",
        None,
        estimates_of("after"),
        versions={"torch": "2.11", "transformers": "5.17", "timm": "1.0.29"},
    ),
    Source(
        "2026-12-03-cpu-plans-through-apply/held-out-predictions.json",
        "families",
        predictions,
        prediction=True,
    ),
    Source("2026-12-03-h200-plans-through-apply/call1/heldout-measured.json", "families", measured),
    Source(
        "2026-12-03-h200-plans-through-apply/call1/convnext-offload-measured.json",
        "offload",
        measured,
    ),
    Source(
        "2026-12-03-cpu-plans-through-apply/vision-reestimated.json",
        None,
        estimates_of(),
        versions=CPU_211,
    ),
    Source(
        "2026-12-03-cpu-plans-through-apply/zero-reestimated.json",
        None,
        reestimated,
        versions=CPU_211,
    ),
    Source(
        "2026-12-03-cpu-cache-free-plans/predictions.json", "settings", predictions, prediction=True
    ),
    Source("2026-12-03-h200-cache-free-plans/call1/measured.json", "settings", measured),
    Source(
        "2026-12-03-cpu-allocator-histories/predictions-held-out.json",
        "settings",
        predictions,
        prediction=True,
    ),
    Source("2026-12-03-h200-allocator-histories/call2/measured.json", "settings", measured),
    Source(
        "2026-12-03-cpu-allocator-histories/estimates-held-out-after-softmax-fix.json",
        None,
        predictions,
    ),
    Source("2026-12-03-cpu-allocator-histories/accuracy.json", "validation", accuracy),
    Source(
        "2026-12-03-cpu-allocator-histories/convnext-offload-estimate-after-gradient-sums.json",
        None,
        predictions,
    ),
    Source("2026-12-04-cpu-plan-proof/plans.json.gz", "planner", plans),
    *(
        Source(
            f"2026-12-04-h200-plan-proof/call2/versus-{part}.json",
            "planner",
            races,
            gpu=H200,
            versions=HOST_211,
        )
        for part in ("a", "b")
    ),
    # the zoo sweep (zoo.py): its models and predictions; each GPU file zoo.py measure writes
    # is declared after them with zoo_measured
    Source(f"{ZOO}/models.json", "zoo", zoo_models),
    Source(f"{ZOO}/estimates.jsonl", "zoo", zoo_estimates, prediction=True),
    Source(f"{ZOO_REPREDICTED}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_CONV_TABLE}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_OP_FIXES}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_OP_FIXES_2}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_CONV_PROBES}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_NORMS}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_ACCUMULATORS}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_BATCH_NORM}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_AUTOCAST}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_LSTM}/estimates.jsonl", "zoo", zoo_estimates),
    Source(f"{ZOO_ROUTING}/estimates.jsonl", "zoo", zoo_estimates),
    *(Source(f"{ZOO_H100}/measured-{k}-of-2.jsonl", "zoo", zoo_measured, gpu=H100) for k in (1, 2)),
    *(Source(f"{ZOO_H100}/measured-{k}-of-4.jsonl", "zoo", zoo_measured, gpu=H100) for k in (1, 3)),
    *(Source(f"{folder}/peaks.jsonl", "zoo", zoo_fresh, gpu=H100) for folder in ZOO_FRESH),
    # the op sweep (op_sweep.py compare): every OpInfo op's allocations, traced and on the GPU
    Source(f"{OP_SWEEP}/summary.json", "opsweep", op_sweep_summary),
    # transformers types the sweep had not taken, predicted and then measured in fresh processes;
    # the second estimates of the last two sets (their convolutions probed as ops first) were
    # committed before the measurements too, but the prediction shown is the first
    Source(f"{ZOO_HELD[0]}/estimates.jsonl", "families", held_out_estimates, prediction=True),
    Source(f"{ZOO_HELD[1]}/peaks.jsonl", "families", held_out_peaks, gpu=H100, versions=HOST_211),
    Source(f"{ZOO_BATCH_NORM}/held-out-estimates.jsonl", "families", held_out_estimates),
    *_probed_first(ZOO_HELD_2, "estimates", held_out_estimates, H100),
    *_probed_first(HANDWRITTEN_3, "predictions", predictions),
    *_probed_first(ZOO_HELD_3, "estimates", held_out_estimates, H200),
    *_probed_first(HANDWRITTEN_4, "predictions", predictions),
    Source(
        "2026-12-07-cpu-handwritten-fourth-after-deform/estimates.json",
        "handwritten",
        predictions,
    ),
    Source(f"{ZOO_HELD_4[0]}/estimates.jsonl", "families", held_out_estimates, prediction=True),
    Source(f"{AFTER_PROBE_5}/detection.jsonl", "families", held_out_estimates),
    Source(f"{ZOO_HELD_4[1]}/peaks.jsonl", "families", held_out_peaks, gpu=H100, versions=HOST_211),
    Source(f"{HANDWRITTEN_5[0]}/predictions.json", "handwritten", predictions, prediction=True),
    Source(f"{AFTER_PROBE_5}/handwritten-fifth.json", "handwritten", predictions),
    Source(f"{HANDWRITTEN_5[1]}/measured.json", "handwritten", measured, versions=GPU_HOST),
    # the fifth set and an earlier packed GRU estimated again after packed RNNs, opt_einsum and
    # autocast's float32 sums were modelled (after their measurements, not predictions)
    Source(f"{AFTER_FIXES_5}/fifth-set-after-autocast-sum.json", "handwritten", predictions),
    # the sixth set, predicted three times before it ran (the first shown); the seeded LSTM
    # seq2seq; LoRA on int8 weights (upper bounds: every column an outlier)
    Source(f"{HANDWRITTEN_6[0]}/predictions.json", "handwritten", predictions, prediction=True),
    Source(f"{HANDWRITTEN_6[0]}/predictions-after-conv-probe.json", "handwritten", predictions),
    Source(f"{HANDWRITTEN_6[0]}/predictions-after-projections.json", "handwritten", predictions),
    Source(f"{SEQ2SEQ}/predictions.json", "handwritten", predictions, prediction=True),
    Source(f"{HANDWRITTEN_6[1]}/hw6-measured.json", "handwritten", measured, versions=GPU_HOST),
    Source(
        f"{HANDWRITTEN_6[1]}/lstm-seq2seq-measured.json",
        "handwritten",
        measured,
        versions=GPU_HOST,
    ),
    # the sixth set estimated again after its measurement: a gradient taken inside the step,
    # then a projected LSTM's reserve space (not predictions)
    Source(f"{AFTER_MEASURED_6}/estimates-after.json", "handwritten", predictions),
    Source(f"{AFTER_MEASURED_6}/biaffine-after-reserve-form.json", "handwritten", predictions),
    # segmentation and grounding types: 10 of 22 measured (the first estimate the prediction)
    Source(f"{ZOO_HELD_5}/estimates.jsonl", "families", held_out_estimates, prediction=True),
    Source(f"{ZOO_HELD_5}/estimates-after-conv-probe.jsonl", "families", held_out_estimates),
    Source(
        f"{HANDWRITTEN_6[1]}/zoo-segmentation-peaks.jsonl",
        "families",
        held_out_peaks,
        gpu=H100,
        versions=HOST_211,
    ),
    Source(f"{INT8}/predictions.json", "techniques", predictions, prediction=True),
    Source(f"{INT8}/predictions-after-product-temporary.json", "techniques", predictions),
    Source(
        f"{HANDWRITTEN_6[1]}/int8-lora-measured.json", "techniques", measured, versions=GPU_HOST
    ),
]

TOPICS: list[tuple[str, str]] = [
    ("validation", "Validation set"),
    ("libraries", "Validation set's T5 workloads under transformers 5.24.0"),
    ("families", "Held-out model families"),
    ("handwritten", "Held-out models written by hand"),
    ("steps", "Step functions: accumulation, generation, mixture of experts"),
    ("settings", "Accumulation, checkpointing and allocator settings"),
    ("compiled", "Compiled steps (torch.compile) and the activation memory budget"),
    ("offload", "Activation offload and offloaded checkpoint inputs"),
    ("parallel", "Data parallel: DDP, FSDP2 and DeepSpeed ZeRO, rank 0"),
    ("optimizer", "Optimizer stepped in backward, 8-bit optimizer states"),
    ("techniques", "Techniques: the optimizer on the host, LoRA, QLoRA, LoRA on int8 weights"),
    ("zoo", "Zoo sweep"),
    ("opsweep", "Op sweep"),
    ("finder", "Batch-size finder"),
    ("planner", "Plans against the configurations that ran"),
    ("steptime", "Step time"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    try:
        page = render(read_all(SOURCES), TOPICS)
    except MissingResultError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if PAGE.exists() and PAGE.read_text() == page:
            return 0
        print(
            "docs/accuracy.md differs from the results: run python benchmarks/accuracy_page.py",
            file=sys.stderr,
        )
        return 1
    PAGE.write_text(page)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
