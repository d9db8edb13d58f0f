#!/bin/bash
T0=$(date +%s)
left() { echo $(( 570 - ($(date +%s) - T0) )); }
bash gpu-calls/clean.sh
gpu-calls/run.sh $(left) python3 -m pytest -x -q -m multi_gpu tests/gpu/test_multinode.py -k "zero3 or requeue"
gpu-calls/run.sh 40 python3 -m hpc_grpo.cli doctor --site sandbox-gpu --bandwidth --json
bash gpu-calls/collect.sh
