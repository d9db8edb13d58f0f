#!/bin/bash
# usage: callW.sh [K]: tests/gpu/test_weights_reach_vllm.py (-k K), then the runs' small files into $OUT
mkdir -p "$OUT"
bash gpu-calls/clean.sh
rm -rf /tmp/bw
gpu-calls/run.sh 540 python3 -m pytest -q -rA -m gpu --basetemp=/tmp/bw tests/gpu/test_weights_reach_vllm.py ${1:+-k "$1"} > "$OUT/weights.log" 2>&1
tail -30 "$OUT/weights.log"
cp /tmp/res/*.json "$OUT/" 2>/dev/null
find /tmp/bw \( -name 'startup.jsonl' -o -name 'state.json' -o -name 'metrics.jsonl' -o -name 'rank-*.log' -o -name 'run.json' -o -name 'plan.txt' \) -size -5M 2>/dev/null | tar -czf "$OUT/bw-small.tgz" -T - 2>/dev/null
ls -la "$OUT"
exit 0
