#!/bin/bash
# usage: callI.sh: rank-like imports (TRL's trainer, vLLM, DeepSpeed) timed without and with the
# bytecode cache (runtime/node/bytecode.py), three of each, into $OUT/imports.json
mkdir -p "$OUT"
cat > /tmp/imp.sh <<'EOS'
set -u
probe() { python3 - <<'EOP'
import json, sys, importlib.util
from hpc_grpo.runtime.node import bytecode
print(json.dumps({"without_bytecode": bytecode.without_bytecode(), "dont_write": sys.flags.dont_write_bytecode}))
EOP
}
t() { local s=$EPOCHREALTIME; "$@" python3 -c "import deepspeed, vllm, trl.trainer.grpo_trainer" >/dev/null 2>&1; awk -v a="$s" -v b="$EPOCHREALTIME" "BEGIN{printf \"%.2f\", b-a}"; }
echo "probe: $(probe)"
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}"
rm -rf /tmp/bcache
for i in 1 2 3; do echo "plain $i $(t env)"; done
for i in 1 2 3; do echo "cache $i $(t env PYTHONPYCACHEPREFIX=/tmp/bcache PYTHONDONTWRITEBYTECODE=)"; done
for i in 1 2; do echo "plain-again $i $(t env)"; done
du -sh /tmp/bcache; find /tmp/bcache -name '*.pyc' | wc -l
EOS
gpu-calls/run.sh 300 bash /tmp/imp.sh > "$OUT/imports.log" 2>&1
cat "$OUT/imports.log"
exit 0
