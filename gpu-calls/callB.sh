#!/bin/bash
# usage: callB.sh RUNS [OUT]: more 7B runs into the same folder
T0=$(date +%s)
left() { echo $(( 580 - ($(date +%s) - T0) )); }
bash gpu-calls/clean.sh
BENCH_STEPS=6 gpu-calls/run.sh $(left) python3 benchmarks/bench_gpu.py two --shape qwen2-7b --out ${2:-/tmp/b7} --runs $1
bash gpu-calls/collect.sh
