#!/bin/bash
# usage: call7.sh [build] K...: optionally build the 7B shape, then tests/gpu/test_resume_7b.py -k K
# one after another (each with the call's remaining time), output into $OUT as written, then collect
T0=$(date +%s)
left() { echo $(( 575 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
rm -rf /tmp/w/pt  # the sandbox tests' run directories (1.5B checkpoints): room for the 7B ones
if [ "$1" = build ]; then shift; gpu-calls/run.sh 300 bash gpu-calls/build7b.sh 2>&1 | tee "$OUT/build.log" | tail -5; fi
for k in "$@"; do
  HPC_GRPO_SUBMIT_TIMEOUT=$(( $(left) - 25 )) gpu-calls/run.sh $(left) python3 -m pytest -x -q -rA -m gpu tests/gpu/test_resume_7b.py -k "$k" 2>&1 | tee "$OUT/$k.log" | tail -25
done
df -h /tmp | tail -1
bash gpu-calls/collect.sh
