#!/bin/bash
# usage: callJ.sh RUNS: 1.5B one-host runs into /tmp/b9, output into $OUT as written, then collect
T0=$(date +%s)
left() { echo $(( 540 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
BENCH_STEPS=10 gpu-calls/run.sh $(left) python3 benchmarks/bench_gpu.py two --shape qwen2-1.5b --out /tmp/b9 --runs $1 2>&1 | tee "$OUT/bench.log" | tail -40
bash gpu-calls/collect.sh
