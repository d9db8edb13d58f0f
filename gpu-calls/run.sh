#!/bin/bash
# usage: gpu-calls/run.sh LIMIT_S CMD... : CMD through scripts/on-gpu under a time limit
export HPC_GRPO_RESULTS=/tmp/res HPC_GRPO_WORK=/tmp/w HPC_GRPO_HOME=/tmp/w/home
export HPC_GRPO_SANDBOX_DEBS=/tmp/debs1 HPC_GRPO_KEEP_SANDBOX=1 TORCH_EXTENSIONS_DIR=/tmp/w/torch_ext
mkdir -p /tmp/res /tmp/w/home/models /tmp/w/torch_ext
limit=$1; shift
start=$(date +%s)
timeout "$limit" scripts/on-gpu "$@"; rc=$?
echo "[run.sh] rc=$rc wall=$(( $(date +%s) - start ))s: $*"
exit 0
