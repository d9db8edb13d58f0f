"""The parts of startup.jsonl's ``parts_s``, ``trainer_parts_s`` and ``prepare_parts_s``: the rank writes them
(runtime/rank/observe/startup_times.py) and ``status`` names them (runs/attempts.py). One table, so a part the
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
# stretches of the "trainer" part timed around the calls, not calls
TRAINER_STRETCHES: dict[str, str] = {
    # the rank's own modules imported for the checks (with transformers' trainer utilities)
    "runtime_imports": "runtime imports",
    "checks_and_inputs": "checks and inputs",  # GRPOConfig, rank and hardware checks, data, tokenizer
    "trainer_import": "TRL and vLLM import",
    "heap_freeze": "heap freeze",  # a full collection, then gc.freeze (rank/setup/startup_heap.py)
    # GRPOTrainer's construction outside the timed calls below (transformers' Trainer, the
    # accelerator, TRL's own set-up)
    "trainer_init_other": "trainer construction, the rest",
    # trackers, the resume's pick and record, the prefetch's start, the rank's callbacks and hooks
    "resume_and_hooks": "resume record and hooks",
}
TRAINER_PART_NAMES: dict[str, str] = {
    **TRAINER_STRETCHES,
    "model_load": "model load",
    "engine_start": "vLLM engine start",  # colocate
    "server_connect": "vLLM server connect",  # server mode: rank 0's client
}

# key in prepare_parts_s (calls timed inside the "prepare_and_load" part) -> the name ``status`` shows
PREPARE_PART_NAMES: dict[str, str] = {
    "accelerate_prepare": "DeepSpeed/accelerate prepare",
    "deepspeed_checkpoint_load": "DeepSpeed checkpoint load",
    "model_checkpoint_load": "model checkpoint load",  # without DeepSpeed
    "optimizer_load": "optimizer and scheduler load",
}

# a part of parts_s -> the record key that splits it and the names of that split
INNER_PARTS: dict[str, tuple[str, dict[str, str]]] = {
    "trainer": ("trainer_parts_s", TRAINER_PART_NAMES),
    "prepare_and_load": ("prepare_parts_s", PREPARE_PART_NAMES),
}
