#!/bin/bash
# usage: callQ.sh K: the CRC-32 write benchmark (GPU tensors, /tmp disk, page cache and fsync), then callS.sh K
export CALL_T0=$(date +%s)
mkdir -p "$OUT"
export HPC_GRPO_RESULTS=/tmp/res
timeout 200 scripts/on-gpu python3 benchmarks/bench_checkpoint_write.py --gib 8 --device cuda --rounds 2 --dir /tmp --out "$OUT/write.json" 2>&1 | tail -6 | tee "$OUT/write.log"
timeout 100 scripts/on-gpu python3 benchmarks/bench_checkpoint_write.py --gib 8 --device cuda --rounds 2 --dir /tmp --sync --out "$OUT/write-sync.json" 2>&1 | tail -6 | tee "$OUT/write-sync.log"
bash gpu-calls/callS.sh "$1"
