#!/bin/bash
# results, bench JSONs and the small files of every run directory into $OUT, as three tarballs
mkdir -p "$OUT"
[ -d /tmp/res ] && tar -czf "$OUT/res.tgz" -C /tmp res 2>/dev/null
find /tmp/b* /tmp/w -maxdepth 4 -path '*runs/*' \( -name '*.jsonl' -o -name '*.json' -o -name '*.log' -o -name 'plan.txt' \) -size -5M 2>/dev/null \
  | grep -v checkpoint | tar -czf "$OUT/runs-small.tgz" -T - 2>/dev/null
find /tmp/b* /tmp/w -maxdepth 5 -path '*logs/*' -name '*.log' -size -5M 2>/dev/null | grep -v checkpoint | tar -czf "$OUT/logs.tgz" -T - 2>/dev/null
df -h /tmp | tail -1; free -g | head -2
(for f in /proc/sys/vm/dirty_*; do echo "$f $(cat $f)"; done; grep -i 'dirty\|writeback' /proc/meminfo; nproc; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader) > "$OUT/host.txt" 2>&1
exit 0
