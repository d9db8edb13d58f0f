#!/bin/bash
# usage: callS.sh K: one sandbox test (-k K) with its run dirs under /tmp/w/pt, then collect them
T0=${CALL_T0:-$(date +%s)}
left() { echo $(( 530 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
rm -rf /tmp/w/pt
gpu-calls/run.sh $(left) python3 -m pytest -x -q -rA -m multi_gpu --basetemp=/tmp/w/pt tests/gpu/test_multinode.py -k "$1" 2>&1 | tee "$OUT/$1.log" | tail -40
find /tmp/w/pt -type f \( -name '*.jsonl' -o -name '*.json' -o -name '*.log' -o -name '*.err' -o -name '*.out' -o -name '*.txt' -o -name '*.sbatch' -o -name '*.sh' \) -size -5M 2>/dev/null | grep -v checkpoint | tar -czf "$OUT/pt-small.tgz" -T - 2>/dev/null
bash gpu-calls/collect.sh
