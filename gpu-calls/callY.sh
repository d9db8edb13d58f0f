#!/bin/bash
# session 50: vLLM weight sync and the generation-buffer stop on the refactored runtime
T0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 300 python3 -m pytest -q -rA -m gpu tests/gpu/test_weights_reach_vllm.py -k "trained_weights_reach or skipped_weight_sync" --durations=0 2>&1 | tail -25 | tee "$OUT/weights.txt"
if [ "$(left)" -gt 200 ]; then
  CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh $(( $(left) - 10 )) python3 -m pytest -q -rA -m gpu tests/gpu/test_generation_buffer_gpu.py --durations=0 2>&1 | tail -25 | tee "$OUT/genbuf.txt"
fi
echo "[Y] done: $(( $(date +%s) - T0 )) s"
