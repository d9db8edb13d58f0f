#!/bin/bash
# checkpoint read: the micro bench to the GPU, then the 1.5B resume whole vs mapped; output into $OUT as written
T0=$(date +%s)
left() { echo $(( 540 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
gpu-calls/run.sh 120 python3 benchmarks/bench_checkpoint_read.py micro --gib 16 --rounds 2 --device cuda --out /tmp/bcr-micro 2>&1 | tee "$OUT/micro.log" | tail -8
gpu-calls/run.sh $(left) python3 benchmarks/bench_checkpoint_read.py resume --shape qwen2-1.5b --out /tmp/bcr --order "${1:-whole,mapped}" 2>&1 | tee "$OUT/resume.log" | tail -12
cp /tmp/bcr-micro/*.json /tmp/bcr/*.json "$OUT/" 2>/dev/null
find /tmp/bcr/runs -type f \( -name '*.jsonl' -o -name '*.json' -o -name '*.log' \) -size -5M 2>/dev/null | grep -v checkpoints | tar -czf "$OUT/bcr-small.tgz" -T - 2>/dev/null
df -h /tmp | tail -1
