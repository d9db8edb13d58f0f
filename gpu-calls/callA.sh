#!/bin/bash
T0=$(date +%s)
left() { echo $(( 580 - ($(date +%s) - T0) )); }
bash gpu-calls/clean.sh
gpu-calls/run.sh 320 bash gpu-calls/build7b.sh
BENCH_STEPS=6 gpu-calls/run.sh $(left) python3 benchmarks/bench_gpu.py two --shape qwen2-7b --out /tmp/b7 --runs plan
bash gpu-calls/collect.sh
