#!/bin/bash
# session 51: the step time learnt on a GPU (#58), on the merged code
T0=$(date +%s)
mkdir -p "$OUT"
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 500 python3 -m pytest -q -rA -m gpu tests/gpu/test_site_init_local_gpu.py tests/gpu/test_workstation_gpu.py -k "site_init_local or learns" --durations=0 2>&1 | tail -40 | tee "$OUT/ws-c.txt"
cp /tmp/res/*.json "$OUT/" 2>/dev/null
echo "[WC] done: $(( $(date +%s) - T0 )) s"
