#!/bin/bash
T0=$(date +%s)
left() { echo $(( 585 - ($(date +%s) - T0) )); }
bash gpu-calls/clean.sh
gpu-calls/run.sh 320 bash gpu-calls/build7b.sh
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh $(left) python3 -m pytest -q -m gpu tests/gpu/test_lora_7b.py -k lora_reference
CUDA_VISIBLE_DEVICES=0 gpu-calls/run.sh $(left) python3 -m pytest -q -m gpu tests/gpu/test_lora_7b.py -k lora_second
bash gpu-calls/collect.sh
