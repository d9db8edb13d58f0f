#!/bin/bash
T0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - T0) )); }
bash gpu-calls/clean.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh $(left) python3 -m pytest -q -m gpu tests/gpu/test_lora_7b.py -k lora_stop_and_resume
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh $(left) python3 -m pytest -q -m gpu tests/gpu/test_lora_7b.py -k lora_cold_cache
bash gpu-calls/collect.sh
