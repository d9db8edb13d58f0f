#!/bin/bash
# session 51: a 0-GPU profile on the GPU machine trains on the CPU (#58)
T0=$(date +%s)
mkdir -p "$OUT"
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 260 python3 -m pytest -q -rA -m gpu tests/gpu/test_workstation_gpu.py -k "cpu_profile" --durations=0 2>&1 | tail -40 | tee "$OUT/ws-d.txt"
cp /tmp/res/*.json "$OUT/" 2>/dev/null
echo "[WD] done: $(( $(date +%s) - T0 )) s"
