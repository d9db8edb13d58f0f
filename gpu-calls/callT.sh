#!/bin/bash
# usage: callT.sh RUNS [ROUNDS]: bench_multinode into /tmp/bm, output into $OUT as written, then collect
T0=$(date +%s)
left() { echo $(( 545 - ($(date +%s) - T0) )); }
mkdir -p "$OUT"
bash gpu-calls/clean.sh
gpu-calls/run.sh $(left) python3 benchmarks/bench_multinode.py --out /tmp/bm --steps 10 --runs "$1" --rounds "${2:-1}" 2>&1 | tee "$OUT/bench.log" | tail -40
cp /tmp/bm/bench-multinode.json "$OUT/" 2>/dev/null
find /tmp/bm -type f \( -name '*.jsonl' -o -name '*.json' -o -name '*.log' -o -name '*.err' -o -name '*.out' \) -size -5M 2>/dev/null | grep -v checkpoint | tar -czf "$OUT/bm-small.tgz" -T - 2>/dev/null
bash gpu-calls/collect.sh
