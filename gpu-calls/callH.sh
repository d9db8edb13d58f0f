#!/bin/bash
# usage: callH.sh K: one sandbox test (-k K), its output into $OUT as it is written, then collect
T0=$(date +%s)
left() { echo $(( 530 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
gpu-calls/run.sh $(left) python3 -m pytest -x -q -rA -m multi_gpu tests/gpu/test_multinode.py -k "$1" 2>&1 | tee "$OUT/$1.log" | tail -40
if [ "${2:-}" = doctor ]; then
  gpu-calls/run.sh 40 python3 -m hpc_grpo.cli doctor --site sandbox-gpu --bandwidth --json 2>&1 | tee "$OUT/doctor.log" | tail -30
fi
bash gpu-calls/collect.sh
