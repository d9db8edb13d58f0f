"""The fake export job the export tests install (moved out of test_export_write.py so that other
test modules share it without importing a test module)."""

from __future__ import annotations

FAKE = """#!{python}
import json, os, sys, time
from pathlib import Path
request = json.load(sys.stdin)
if os.environ.get("FAKE_ENV_OUT"):  # what the child was given, for the tests of where it writes
    Path(os.environ["FAKE_ENV_OUT"]).write_text(json.dumps(dict(os.environ)))
target = Path(request["target"])
(target / "model.safetensors").write_text("weights")
(target / "model.safetensors").chmod(0o600)  # as transformers' save_pretrained leaves it
(target / "config.json").write_text("{{}}")
mode = os.environ.get("FAKE_EXPORT", "ok")
check = {{"max_abs_diff": 0.25 if mode == "fail" else 0.001, "mean_abs_diff": 0.0,
         "tolerance": 0.05, "tokens": 56, "texts": 4, "greedy_equal": 4, "engine": "fake"}}
if mode == "crash":
    print("RuntimeError: out of host memory", file=sys.stderr)
    sys.exit(1)
if mode == "hang":
    (target.parent / "child-started").write_text(str(os.getpid()))
    time.sleep(60)
answer = {{"ok": mode != "fail", "check": check, "notes": ["a note"]}}
if mode == "fail":
    answer["error"] = "log-probabilities differ by up to 0.25, above the tolerance 0.05"
Path(sys.argv[3]).write_text(json.dumps(answer))
sys.exit(0 if answer["ok"] else 1)
"""
