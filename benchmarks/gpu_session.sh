#!/usr/bin/env bash
# GPU runs in few device calls (device time is scarce; one call may run 10 minutes):
# run from the repository root on the GPU machine with $OUT set, one part per call:
#
#   bash benchmarks/gpu_session.sh tests [nvml|profile]  # GPU tests, guard benchmark, SDPA probe (~4 min)
#   bash benchmarks/gpu_session.sh finders    # find_batch_size vs accelerate, all workloads (~9 min)
#   bash benchmarks/gpu_session.sh attention  # SDPA's kernel choice: synthetic grid and real models (~6 min)
#   bash benchmarks/gpu_session.sh monitor    # monitor overhead (~3 min) and the cuDNN probe (~5 min)
#   bash benchmarks/gpu_session.sh x2         # on 2 GPUs: DDP guard test, 2-GPU NVML fixture, monitor
#   bash benchmarks/gpu_session.sh sweeps [SECONDS]  # fit and finder tests, then the op sweep
#                                             # (3 shards) beside the zoo sweep (2 shards), the
#                                             # zoo's convolutions, allocator histories
#   HELDOUT=... ZOO_HISTORY=... bash benchmarks/gpu_session.sh recheck [SECONDS]
#                                             # held-out workloads, zoo workloads in fresh
#                                             # processes, then SECONDS more of the zoo sweep
#   bash benchmarks/gpu_session.sh heldout ID...  # predict on this host's CPU first, then measure
#                                             # with allocator traces (fresh process each)
#   bash benchmarks/gpu_session.sh handwritten-segmentation  # the sixth hand-written set beside
#                                             # the segmentation and grounding types (histories
#                                             # kept), then LSTMs with projections probed (~9 min)
#   bash benchmarks/gpu_session.sh quantized  # LoRA on int8 weights, the seeded LSTM seq2seq,
#                                             # nf4 serving's concurrency and one more (~9 min)
#   bash benchmarks/gpu_session.sh combined   # the sixth hand-written set beside the quantized
#                                             # part and the GPU tests of memfit.apply, offload and
#                                             # LoRA, at once (~10 min; on an H100 the serving
#                                             # check waits for the GPU to itself)
#                                             # LoRA, at once (~10 min; serving on a GPU of more
#                                             # than 100 GiB only, where it fits beside the rest)
#
# bitsandbytes and PEFT are not on the GPU host: carry their Python files (and bitsandbytes'
# CUDA library) in a folder and put it on PYTHONPATH.
#
# Each step has its own time limit, so that a slow one cannot starve the rest, and writes its
# results under $OUT as soon as it ends; steps.txt says how each ended.
set -u
export PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}  # and a carried folder of extra packages
mkdir -p "$OUT"
step() {  # step NAME SECONDS COMMAND... (no step runs past $DEADLINE seconds less 25, if set)
    local name=$1 limit=$2
    shift 2
    if [ -n "${DEADLINE:-}" ] && [ $((DEADLINE - SECONDS - 25)) -lt "$limit" ]; then
        limit=$((DEADLINE - SECONDS - 25))
        [ "$limit" -lt 5 ] && limit=5
    fi
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/steps.txt"
}
zoo_shard() {  # K SECONDS: zoo.py measure, started again after a CUDA error ends it (exit 3)
    local k=$1 end=$((SECONDS + $2)) rc=3
    while [ "$rc" -eq 3 ] && [ "$SECONDS" -lt $((end - 30)) ]; do
        OMP_NUM_THREADS=3 timeout $((end - SECONDS + 60)) python benchmarks/zoo.py measure \
            --shard "$k/2" --budget-seconds $((end - SECONDS)) \
            --out "$OUT/sweeps/zoo-measured-$k-of-2.jsonl" >> "$OUT/zoo-$k.log" 2>&1
        rc=$?
        echo "zoo-$k: exit $rc at $SECONDS s" | tee -a "$OUT/steps.txt"
    done
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" >> "$OUT/gpu.txt"

case "${1:-tests}" in
tests)
    # NVML fixtures for the watch/export tests (committed; again only when asked): alone, so
    # "idle" is idle
    [ "${2:-}" = nvml ] && step nvml-record 60 python benchmarks/nvml_record.py --out "$OUT/nvml-h200.json.gz"
    # GPU tests (4 workers) beside the guard benchmark: correctness only, no timings compared
    step guard-bench 140 python benchmarks/guard_gpu.py --out "$OUT/guard_gpu.json" &
    step gpu-tests 150 python -m pytest -q -n 4 --timeout 130 tests/gpu -p no:cacheprovider -rA \
        --ignore tests/gpu/test_batch_size_gpu.py
    wait
    # the finder's tests fill the GPU to its budget: alone, or a test beside them runs out of
    # memory for want of what they hold (seen on 2026-12-01: 132 GiB held by a finder trial)
    step gpu-tests-finder 120 python -m pytest -q tests/gpu/test_batch_size_gpu.py -p no:cacheprovider -rA
    # which attention kernel SDPA picks, and what it allocates
    step sdpa-probe 120 python benchmarks/sdpa_probe.py --out "$OUT/sdpa_probe.json"
    # where find_batch_size's time goes (only when asked: measured on 2026-11-30)
    [ "${2:-}" = profile ] && step bs-profile 200 python benchmarks/batch_size_profile.py --out "$OUT/batch_size_profile.json"
    ;;
finders)
    # timed: alone on the machine (the finder's GPU tests run in the tests part)
    step batch-size-bench 570 python benchmarks/batch_size_gpu.py --out "$OUT/batch_size.json"
    ;;
attention)
    # which attention kernel SDPA picks: a grid of synthetic calls, then the validation set's
    # own calls (each model at a small batch)
    step sdpa-probe 120 python benchmarks/sdpa_probe.py --out "$OUT/sdpa_probe.json"
    step sdpa-calls 420 python benchmarks/sdpa_calls.py --out "$OUT/sdpa_calls.json"
    ;;
monitor)
    # the finder's GPU tests again (for changes made after the tests part ran)
    step gpu-tests-finder 70 python -m pytest -q tests/gpu/test_batch_size_gpu.py -p no:cacheprovider -rA
    step monitor-bench 200 python benchmarks/monitor_overhead.py --out "$OUT/monitor_overhead.json"
    # the probe writes its file at the end: convolutions and LSTMs in two runs, so that a time
    # limit costs one of them only
    step cudnn-probe-lstm 90 python benchmarks/cudnn_probe.py "$OUT/cudnn_probe_lstm.json" \
        --models --lstm-layers 1 2 3 4 --lstm-infer
    step cudnn-probe-conv 190 python benchmarks/cudnn_probe.py "$OUT/cudnn_probe_conv.json" \
        --lstm-hidden --models resnet50 convnext_tiny efficientnet_b0 resnet18 mobilenet_v3_large \
        --conv-batches 1 16 64 96 256
    gzip -f "$OUT"/cudnn_probe_*.json
    ;;
x2)
    # on the nvidia-h200-x2 machine (carry .whl: nvidia-ml-py, in case its image lacks it)
    python -c "import pynvml" 2>/dev/null || {
        python -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
            export PYTHONPATH=src:/tmp/site
    }
    python - > "$OUT/x2-env.txt" 2>&1 <<'PY'
import importlib, torch
print(torch.__version__, torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
for name in ("transformers", "pynvml", "prometheus_client", "rich", "psutil"):
    try:
        m = importlib.import_module(name)
        print(name, getattr(m, "__version__", "ok"))
    except ImportError as exc:
        print(name, "MISSING", exc)
PY
    [ "${2:-}" = sampling ] || step ddp-gpu-test 200 python -m pytest -q -s tests/gpu/test_ddp_microbatch_gpu.py -p no:cacheprovider -rA
    if [ "${2:-}" = sampling ]; then  # the sampling cost alone, again
        step monitor-sampling-x2 100 python benchmarks/monitor_overhead.py \
            --out "$OUT/monitor_sampling_x2.json" --parts sampling
    elif python -c "import pynvml, transformers" 2>/dev/null; then
        step nvml-record-x2 90 python benchmarks/nvml_record.py --out "$OUT/nvml-h200x2.json.gz"
        step monitor-bench-x2 150 python benchmarks/monitor_overhead.py --out "$OUT/monitor_overhead_x2.json"
    fi
    ;;
sweeps)
    # resumes: the files already measured travel in $SWEEP_FROM (op-measured-K-of-3.jsonl,
    # zoo-measured-K-of-2.jsonl); each shard appends to its own copy. With
    # $SWEEP_FROM/zoo-convs.json (zoo_convs.py list), its convolutions are probed beside them;
    # with $ZOO_HISTORY (zoo workload ids), their allocator histories are recorded at the end.
    step gpu-tests-fit 150 python -m pytest -q tests/gpu/test_fit_gpu.py \
        tests/gpu/test_batch_size_gpu.py -p no:cacheprovider -rA -v --timeout 120
    seconds=${2:-330}
    mkdir -p "$OUT/sweeps"
    [ -n "${SWEEP_FROM:-}" ] && cp "$SWEEP_FROM"/*-measured-*.jsonl "$OUT/sweeps/" 2>/dev/null
    for k in 1 2 3; do
        OMP_NUM_THREADS=3 step "op-sweep-$k" $((seconds + 90)) python benchmarks/op_sweep.py \
            measure "$OUT/sweeps/op-measured-$k-of-3.jsonl" --shard $((k - 1))/3 \
            --budget-s "$seconds" --case-timeout 30 &
    done
    for k in 1 2; do zoo_shard "$k" "$seconds" & done
    if [ -f "${SWEEP_FROM:-}/zoo-convs.json" ]; then
        step zoo-convs $((seconds + 60)) python benchmarks/zoo_convs.py probe \
            "$SWEEP_FROM/zoo-convs.json" --out "$OUT/zoo-convs-probe.json.gz" --budget-s "$seconds" &
    fi
    wait
    if [ -n "${ZOO_HISTORY:-}" ]; then
        # shellcheck disable=SC2086  # ids, one word each
        step zoo-history 150 python benchmarks/zoo_history.py "$OUT/history" $ZOO_HISTORY
        (cd "$OUT/history" && tar czf ../history.tar.gz ./*) && rm -rf "$OUT/history"
    fi
    (cd "$OUT/sweeps" && tar czf ../sweeps.tar.gz ./*.jsonl) && rm -rf "$OUT/sweeps"
    ;;
recheck)
    # one at a time, nothing beside: the held-out workloads of $HELDOUT (predicted and
    # committed before), then the zoo workloads of $ZOO_HISTORY again, each in a fresh process
    # with its allocator history, then what is left of the zoo sweep ($SWEEP_FROM's files)
    # shellcheck disable=SC2086  # ids, one word each
    step measure 300 python benchmarks/gpu_measure.py "$OUT/m" --only $HELDOUT --traces
    mv "$OUT/m/measured.json" "$OUT/measured.json" 2>/dev/null
    (cd "$OUT/m" && tar czf ../traces.tar.gz ./*.pickle.gz) && rm -rf "$OUT/m"
    # shellcheck disable=SC2086
    step zoo-history 200 python benchmarks/zoo_history.py "$OUT/history" $ZOO_HISTORY
    (cd "$OUT/history" && tar czf ../history.tar.gz ./*) && rm -rf "$OUT/history"
    mkdir -p "$OUT/sweeps"
    cp "$SWEEP_FROM"/zoo-measured-*.jsonl "$OUT/sweeps/"
    zoo_shard 1 "${2:-60}"
    (cd "$OUT/sweeps" && tar czf ../sweeps.tar.gz ./*.jsonl) && rm -rf "$OUT/sweeps"
    ;;
heldout)
    shift
    # the prediction is written (and timestamped) before the first measurement starts
    step predict-host 240 python benchmarks/predict.py --only "$@" --out "$OUT/predictions-host.json"
    step measure 420 python benchmarks/gpu_measure.py "$OUT/m" --only "$@" --traces
    mv "$OUT/m/measured.json" "$OUT/measured.json" 2>/dev/null
    (cd "$OUT/m" && tar czf ../traces.tar.gz ./*.pickle.gz) && rm -rf "$OUT/m"
    ;;
handwritten-segmentation)
    # two processes at once (each workload in a fresh child): at most about 50 GiB together
    hw6="hw6-segnet-unpool-fp16mixed-b24 hw6-sngan-discriminator-bf16mixed-b256
        hw6-wgan-gp-fp32-b128 hw6-transformer-translator-bf16mixed-b64-s256
        hw6-fold-inpainting-fp16mixed-b64 hw6-unet3d-volume-bf16mixed-b4
        hw6-biaffine-parser-fp32-b1024-s64 hw6-dcp-registration-fp32-b32
        hw6-complex-rotary-lm-bf16mixed-b8-s2048 hw6-bicubic-sr-fp16mixed-b16"
    zoo=""
    for t in eomt eomt_dinov3 grounding-dino mask2former maskformer mm-grounding-dino sam sam2 \
        sam3_tracker sam_hq oneformer; do zoo="$zoo hf:$t/train hf:$t/infer"; done
    models=benchmarks/results/2026-12-07-cpu-zoo-held-out-segmentation-grounding/models.json
    (
        # shellcheck disable=SC2086
        step hw6 430 python benchmarks/gpu_measure.py "$OUT/hw6" --only $hw6 --traces
        step lstm-proj-probe 90 python benchmarks/cudnn_probe.py "$OUT/proj-shares.json" --models \
            --conv-batches --rnn-kinds lstm --lstm-proj 0.375 --lstm-hidden 512 800 1024 \
            --lstm-layers 1 3 --lstm-batches 16 64 --lstm-seqs 64 256 --lstm-dtypes fp32 fp16 \
            --lstm-infer
    ) &
    # shellcheck disable=SC2086
    step zoo-history 530 python benchmarks/zoo_history.py "$OUT/zoo" $zoo --models "$models" \
        --timeout 90
    wait
    (cd "$OUT/hw6" && tar cf ../hw6-traces.tar ./*.pickle.gz) && rm -f "$OUT"/hw6/*.pickle.gz
    (cd "$OUT/zoo" && tar cf ../zoo-histories.tar ./*.pickle.gz) && rm -f "$OUT"/zoo/*.pickle.gz
    ;;
quantized)
    step int8-lora 280 python benchmarks/gpu_measure.py "$OUT/int8" --only \
        tinyllama-bf16-b8-s1024-int8-lora16 qwen2.5-0.5b-bf16-b8-s1024-int8-lora16 \
        mistral-7b-bf16-b4-s1024-ckpt-int8-lora16 gemma-2b-bf16-b4-s1024-int8-lora64
    step seq2seq 90 python benchmarks/gpu_measure.py "$OUT/seq2seq" \
        --only hw5-lstm-seq2seq-fp16mixed-b128-s128 --traces
    step serving-nf4 200 python benchmarks/serving.py measure \
        benchmarks/results/2026-12-07-cpu-serving-nf4-predictions/predictions.json \
        --out "$OUT/serving-nf4.json"
    ;;
combined)
    hw6="hw6-segnet-unpool-fp16mixed-b24 hw6-sngan-discriminator-bf16mixed-b256
        hw6-wgan-gp-fp32-b128 hw6-transformer-translator-bf16mixed-b64-s256
        hw6-fold-inpainting-fp16mixed-b64 hw6-unet3d-volume-bf16mixed-b4
        hw6-biaffine-parser-fp32-b1024-s64 hw6-dcp-registration-fp32-b32
        hw6-complex-rotary-lm-bf16mixed-b8-s2048 hw6-bicubic-sr-fp16mixed-b16"
    big=$(python -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory > 100 * 2**30))")
    # shellcheck disable=SC2086
    step hw6 400 python benchmarks/gpu_measure.py "$OUT/hw6" --only $hw6 --traces &
    step gpu-tests 150 python -m pytest -q -n 2 --timeout 130 tests/gpu/test_apply_gpu.py \
        tests/gpu/test_offload_gpu.py tests/gpu/test_lora_gpu.py -p no:cacheprovider -rA &
    step int8-lora 270 python benchmarks/gpu_measure.py "$OUT/int8" --only \
        tinyllama-bf16-b8-s1024-int8-lora16 qwen2.5-0.5b-bf16-b8-s1024-int8-lora16 \
        mistral-7b-bf16-b4-s1024-ckpt-int8-lora16 gemma-2b-bf16-b4-s1024-int8-lora64
    step seq2seq 80 python benchmarks/gpu_measure.py "$OUT/seq2seq" \
        --only hw5-lstm-seq2seq-fp16mixed-b128-s128 --traces
    # on an H100 (the GPU it was predicted for) the serving check needs the whole GPU: last
    [ "$big" = 1 ] || wait
    step serving-nf4 180 python benchmarks/serving.py measure \
        benchmarks/results/2026-12-07-cpu-serving-nf4-predictions/predictions.json \
        --out "$OUT/serving-nf4.json"
    wait
    (cd "$OUT/hw6" && tar cf ../hw6-traces.tar ./*.pickle.gz) && rm -f "$OUT"/hw6/*.pickle.gz
    (cd "$OUT" && tar czf results.tar.gz hw6 int8 seq2seq serving-nf4.json 2>/dev/null)
    rm -rf "$OUT/hw6" "$OUT/int8" "$OUT/seq2seq" "$OUT/serving-nf4.json"
    ;;
*)
    echo "unknown part '$1': give tests, finders, attention, monitor, sweeps, recheck, x2," \
        "heldout, handwritten-segmentation, quantized or combined" >&2
    exit 2
    ;;
esac
cat "$OUT/steps.txt"
# at most 8 files come back from the device: the logs travel as one archive
(cd "$OUT" && tar czf logs.tar.gz ./*.log ./*.txt && rm -f ./*.log ./*.txt)
ls "$OUT"
