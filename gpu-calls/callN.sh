#!/bin/bash
# session 49: the LoRA weights tests (healthy and stale) on a fresh machine
T0=$(date +%s)
mkdir -p "$OUT"
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 470 python3 -m pytest -q -rA -m gpu tests/gpu/test_weights_reach_vllm.py -k lora_merged --durations=0 2>&1 | tail -25 | tee "$OUT/weights-lora.txt"
echo "[N] done: $(( $(date +%s) - T0 )) s"
