#!/usr/bin/env bash
export PYTHONPATH=src:$PWD/.whl/site
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
for order in measure-first estimate-first; do
  timeout 150 python gpu-in/qlora_history.py $order > "$OUT/$order.log" 2>&1; echo "$order: exit $?" >> "$OUT/gpu.txt"
done
cat "$OUT/gpu.txt"; grep RESULT "$OUT"/*.log; tail -3 "$OUT"/*.log
