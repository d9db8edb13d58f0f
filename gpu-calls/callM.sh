#!/bin/bash
# session 49: the generation-buffer stop test, then the skipped-sync weights test if time is left
T0=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 400 python3 -m pytest -q -rA -m gpu tests/gpu/test_generation_buffer_gpu.py --durations=0 2>&1 | tail -25 | tee "$OUT/genbuf.txt"
if [ "$(left)" -gt 120 ]; then
  CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh $(left) python3 -m pytest -q -rA -m gpu tests/gpu/test_weights_reach_vllm.py -k skipped_weight_sync --durations=0 2>&1 | tail -25 | tee "$OUT/weights-skip.txt"
fi
echo "[M] done: $(( $(date +%s) - T0 )) s"
