#!/bin/bash
# session 50: the LoRA merged-weights tests on the refactored runtime
T0=$(date +%s)
mkdir -p "$OUT"
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 480 python3 -m pytest -q -rA -m gpu tests/gpu/test_weights_reach_vllm.py -k lora_merged --durations=0 2>&1 | tail -14 | tee "$OUT/lora.txt"
echo "[L] done: $(( $(date +%s) - T0 )) s"
