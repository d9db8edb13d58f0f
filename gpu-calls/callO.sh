#!/bin/bash
# usage: callO.sh RUNS: 7B on one GPU, bench_gpu.py one (hpc-grpo's plan beside bare TRL with its GRPOConfig)
T0=$(date +%s)
mkdir -p "$OUT"
bash gpu-calls/clean.sh
BENCH_STEPS=6 gpu-calls/run.sh 570 python3 benchmarks/bench_gpu.py one --shape qwen2-7b --runs "$1" --out /tmp/b7 2>&1 | tee "$OUT/bench7.log" | tail -30
cp /tmp/b7/*.json "$OUT/" 2>/dev/null
bash gpu-calls/collect.sh
