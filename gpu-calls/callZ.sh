#!/bin/bash
# usage: callZ.sh: the ZeRO-2 checkpoint without model.safetensors, exported (tests/gpu/test_gpu.py)
mkdir -p "$OUT"
gpu-calls/run.sh 230 python3 -m pytest -x -q -rA -m gpu --basetemp=/tmp/w/z2 tests/gpu/test_gpu.py -k zero2_dp2 2>&1 | tee "$OUT/zero2.log" | tail -40
find /tmp/w/z2 -type f \( -name '*.jsonl' -o -name '*.json' -o -name '*.log' \) -size -5M 2>/dev/null | grep -v "checkpoints/" | tar -czf "$OUT/z2-small.tgz" -T - 2>/dev/null
find /tmp/w/z2 -path '*checkpoint-2*' -type f -printf '%s %p\n' > "$OUT/z2-files.txt" 2>/dev/null
exit 0
