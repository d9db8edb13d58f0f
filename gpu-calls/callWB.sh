#!/bin/bash
# session 51: the workstation path (#58): export + eval of the resumed run, the README's first job
T0=$(date +%s)
mkdir -p "$OUT"
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 540 python3 -m pytest -q -rA -m gpu tests/gpu/test_workstation_gpu.py -k "export_eval or readme" --durations=0 2>&1 | tail -40 | tee "$OUT/ws-b.txt"
cp /tmp/res/*.json "$OUT/" 2>/dev/null
echo "[WB] done: $(( $(date +%s) - T0 )) s"
