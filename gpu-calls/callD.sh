#!/bin/bash
# the same loan's control run (GPU 0) beside the stop and resume (GPU 1), then collect
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 560 python3 -m pytest -q -m gpu tests/gpu/test_lora_7b.py -k lora_second > /tmp/second.log 2>&1 &
sleep 20
CUDA_VISIBLE_DEVICES=1 gpu-calls/run.sh 540 python3 -m pytest -q -m gpu tests/gpu/test_lora_7b.py -k lora_stop_and_resume
wait
cat /tmp/second.log | tail -30
bash gpu-calls/collect.sh
