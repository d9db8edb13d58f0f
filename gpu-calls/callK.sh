#!/bin/bash
# session 49: the imports bench with the ranks' bytecode cache, then as installed; then the weights test
T0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
gpu-calls/run.sh $(left) python3 benchmarks/bench_rank_imports.py --rounds 4 --deepspeed --vllm --output-root /tmp/bc 2>&1 | tee "$OUT/imports-bytecode.txt"
echo "[K] after bytecode bench: $(( $(date +%s) - T0 )) s"
gpu-calls/run.sh $(left) python3 benchmarks/bench_rank_imports.py --rounds 3 --deepspeed --vllm --as-installed 2>&1 | tee "$OUT/imports-as-installed.txt"
echo "[K] after as-installed bench: $(( $(date +%s) - T0 )) s"
if [ "$(left)" -gt 200 ]; then
  CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh $(( $(left) - 10 )) python3 -m pytest -q -rA -m gpu tests/gpu/test_weights_reach_vllm.py -k trained_weights_reach 2>&1 | tail -30 | tee "$OUT/weights.txt"
fi
nproc > "$OUT/host.txt"; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >> "$OUT/host.txt" 2>&1
echo "[K] done: $(( $(date +%s) - T0 )) s"
