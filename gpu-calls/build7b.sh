#!/bin/bash
# the 7B shape (random weights) into a .part folder, renamed when complete; DeepSpeed's CPU Adam beside it
set -u
M=/tmp/w/home/models/qwen2-7b
if [ ! -d $M ]; then
  rm -rf $M.part; python3 -m hpc_grpo.runtime.models.shapes qwen2-7b $M.part && mv $M.part $M &
fi
python3 -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('cpu adam ok')" &
wait
ls $M && du -sh $M
