"""The parts of startup.jsonl's ``parts_s`` and ``trainer_parts_s``: the rank writes them
(runtime/rank/startup.py) and ``status`` names them (runs/attempts.py). One table, so a part the
rank adds is named on the launcher side too."""

from __future__ import annotations

# key in parts_s, in the order the rank marks them -> the name ``status`` shows
PART_NAMES: dict[str, str] = {
    "imports": "imports",
    "torch_and_group": "torch and process group",
    "trainer": "trainer and engine",
    "prepare_and_load": "prepare and load",
    "first_step": "first step",
}

# key in trainer_parts_s (calls timed inside the "trainer" part) -> the name ``status`` shows
TRAINER_PART_NAMES: dict[str, str] = {
    "checks_and_inputs": "arguments, checks and inputs",  # GRPOConfig, rank checks, data, tokenizer
    "trainer_import": "TRL and vLLM import",
    "model_load": "model load",
    "engine_start": "vLLM engine start",  # colocate
    "server_connect": "vLLM server connect",  # server mode: rank 0's client
}
