#!/usr/bin/env bash
# Every GPU run of one session in one call (device time is scarce): run from the repository
# root on the GPU machine with $OUT set; each step has its own time limit so that a slow one
# cannot starve the rest, and each writes its results under $OUT as soon as it ends.
set -u
export PYTHONPATH=src
mkdir -p "$OUT"
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/steps.txt"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" >> "$OUT/gpu.txt"

# 1. NVML fixtures for the watch/export tests: alone, so "idle" is idle
step nvml-record 60 python benchmarks/nvml_record.py --out "$OUT/nvml-h200.json.gz"

# 2. GPU tests (4 workers) while the guard benchmark runs beside them: correctness only
step guard-bench 140 python benchmarks/guard_gpu.py --out "$OUT/guard_gpu.json" &
step gpu-tests 150 python -m pytest -q -n 4 --timeout 130 tests/gpu -p no:cacheprovider -rA
wait

# 3. timed benchmarks, alone
step batch-size-bench 120 python benchmarks/batch_size_gpu.py --workloads bert --out "$OUT/batch_size.json"
step monitor-bench 60 python benchmarks/monitor_overhead.py --out "$OUT/monitor_overhead.json" --samples 200 --rounds 2 --steps 30
cat "$OUT/steps.txt"
