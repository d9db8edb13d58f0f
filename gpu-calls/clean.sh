#!/bin/bash
# end what an earlier call's timeout left running (a script file: inline, the pattern kills the call's shell)
pkill -9 -f "hpc_grpo|vllm|torchrun" || true
sleep 2
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader || true
