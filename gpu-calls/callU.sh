#!/bin/bash
# one cold server-mode run (1.5B, 6 steps), then where its vLLM wrote its caches
T0=$(date +%s)
mkdir -p "$OUT"
bash gpu-calls/clean.sh
ls -d /root/.cache/vllm 2>&1 | tee "$OUT/before.txt"
BENCH_STEPS=6 gpu-calls/run.sh 300 python3 benchmarks/bench_gpu.py two --shape qwen2-1.5b --out /tmp/b10 --runs server 2>&1 | tee "$OUT/bench.log" | tail -15
{ echo "--- ~/.cache/vllm after:"; ls -la /root/.cache/vllm 2>&1; echo "--- /tmp/hpc-grpo-*:"; ls -d /tmp/hpc-grpo-* 2>&1
  echo "--- server log cache lines:"; grep -h "cache directory\|Directly load\|torch.compile took\|Application startup\|init_weight_transfer\|Error\|Traceback" $(find /tmp/b10 -name vllm-server.log) 2>&1 | cut -c1-250
  echo "--- compile cache:"; find /tmp/b10 -maxdepth 3 -name '.compile-cache' -exec du -sh {} \; ; ls $(find /tmp/b10 -maxdepth 3 -name '.compile-cache') 2>&1; } | tee "$OUT/where.txt"
cp /tmp/b10/*.json "$OUT/" 2>/dev/null
echo "[callU] wall $(( $(date +%s) - T0 )) s"
