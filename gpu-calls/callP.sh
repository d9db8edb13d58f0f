#!/bin/bash
# usage: callP.sh [build] K...: call7.sh with rank 0's start-up profile on, then the profiles into $OUT
export HPC_GRPO_STARTUP_PROFILE=1
bash gpu-calls/call7.sh "$@"
find /tmp/b* /tmp/w -name 'startup-profile-rank-0.*' -size -20M 2>/dev/null | tar -czf "$OUT/profiles.tgz" -T - 2>/dev/null
ls -la "$OUT"
exit 0
