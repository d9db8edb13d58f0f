#!/bin/bash
# usage: callV.sh: the checkpoint write benchmark, every variant (GPU tensors, /tmp disk, page cache)
mkdir -p "$OUT"
export HPC_GRPO_RESULTS=/tmp/res
timeout 400 scripts/on-gpu python3 benchmarks/bench_checkpoint_write.py --gib 8 --device cuda --rounds 2 --dir /tmp --variants with_crc32,without_crc32,host_first,pinned_first,torch_pinned --out "$OUT/write-variants.json" 2>&1 | tail -14 | tee "$OUT/write-variants.log"
free -g | head -2
