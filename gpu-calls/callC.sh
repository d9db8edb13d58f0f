#!/bin/bash
# 7B LoRA reference (one GPU), then collect
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh 560 python3 -m pytest -q -m gpu tests/gpu/test_lora_7b.py -k lora_reference
bash gpu-calls/collect.sh
