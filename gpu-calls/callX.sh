#!/bin/bash
# session 50: the one-GPU tests on the refactored runtime (rank hooks, regrouped rank, shared/)
T0=$(date +%s)
mkdir -p "$OUT"
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 520 python3 -m pytest -q -rA -m gpu tests/gpu/test_hardware_gpu.py tests/gpu/test_gpu.py --durations=0 2>&1 | tail -30 | tee "$OUT/gpu-tests.txt"
nproc > "$OUT/host.txt"; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >> "$OUT/host.txt" 2>&1
echo "[X] done: $(( $(date +%s) - T0 )) s"
