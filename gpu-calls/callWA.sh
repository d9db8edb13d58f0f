#!/bin/bash
# session 51: the workstation path (#58): site init --local, plan, reference, cancel + resume
T0=$(date +%s)
mkdir -p "$OUT"
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 530 python3 -m pytest -q -rA -m gpu tests/gpu/test_site_init_local_gpu.py tests/gpu/test_workstation_gpu.py -k "site_init or cancel_resume" --durations=0 2>&1 | tail -40 | tee "$OUT/ws-a.txt"
cp /tmp/res/*.json "$OUT/" 2>/dev/null
echo "[WA] done: $(( $(date +%s) - T0 )) s"
