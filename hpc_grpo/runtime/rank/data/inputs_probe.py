"""The login node's look at the job's inputs, with the runtime's own code:
``python -m hpc_grpo.runtime.rank.data.inputs_probe ANSWER.json < request.json``.

The launcher (preflight/inputs_probe.py) runs this in a child process with the site's python,
so it never imports torch itself. The request holds run.json's dataset and model blocks, the
reward specs, their keyword arguments and weights. The answer (JSON, written to ANSWER.json so
that user code printing to stdout cannot garble it) holds one of:
- ``skipped``: this interpreter lacks the training stack (a line for the user);
- ``error`` + ``field``: a problem the ranks would hit (a reward that does not import or fails
  on the first row, a missing column); the launcher refuses the job with it;
- otherwise ``rewards`` (each reward's value on the sample row), ``longest_prompt_tokens``
  (None when the tokenizer or a hub dataset cannot be read here) and ``notes``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.contract import DatasetBlock, ModelBlock
from hpc_grpo.runtime.rank.data import job_inputs
from hpc_grpo.runtime.rank.data.dataset import DatasetError, longest_prompt_tokens
from hpc_grpo.runtime.rank.data.rewards import RewardError
from hpc_grpo.runtime.rank.setup.model_load import load_tokenizer
from hpc_grpo.runtime.shared.setup_failure import exception_line

# attn_implementation values that need a package of their own: the package's import name.
ATTENTION_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def attention_problem(attn: str) -> str:
    """Why the ranks could not load the model with ``attn``, judged by this interpreter (the
    site's python): every rank raised transformers' ImportError before step 1 (issue #27)."""
    package = ATTENTION_PACKAGES.get(attn)
    if package is None or importlib.util.find_spec(package) is not None:
        return ""
    return (f"attn_implementation {attn!r} needs the {package} package, which {sys.executable} "
            "does not have: install it there, or --set attn_implementation=sdpa")


def probe(request: dict[str, Any]) -> dict[str, Any]:
    """Load and check what the ranks will load; see the module docstring for the answer."""
    block = DatasetBlock(**request["dataset"])
    specs = list(request["reward_funcs"])
    notes: list[str] = []
    attn = str((request.get("model_load") or {}).get("attn_implementation") or "")
    if problem := attention_problem(attn):
        return {"error": problem, "field": "attn_implementation"}
    try:
        rewards = job_inputs.load_rewards(specs, request.get("reward_kwargs") or {},
                                          request.get("reward_weights") or (), block.solution_column)
    except RewardError as exc:
        return {"error": str(exc), "field": "reward_funcs"}
    hub = not (block.name.startswith("builtin:") or Path(block.name).exists())
    try:
        dataset = job_inputs.load_dataset(block, specs)
    except DatasetError as exc:
        if not hub:
            return {"error": str(exc), "field": "dataset"}
        notes.append(f"dataset not checked on this machine: {exc}")
        return {"rewards": {}, "longest_prompt_tokens": None, "notes": notes}
    tokenizer, longest = None, None
    try:
        if request.get("model"):  # "": a built-in model not built yet
            tokenizer = load_tokenizer(request["model"], ModelBlock(**request.get("model_load") or {}))
            longest = longest_prompt_tokens(dataset, tokenizer)
    except DatasetError as exc:
        return {"error": str(exc), "field": "dataset"}
    except Exception as exc:  # a hub model not in the cache here: the ranks may still have it
        notes.append(f"prompt lengths not measured: the model's tokenizer does not load here "
                     f"({exception_line(exc)})")
    try:
        values = job_inputs.call_once(specs, rewards, dataset[0], block.solution_column, tokenizer)
    except ValueError as exc:
        return {"error": str(exc), "field": "reward_funcs"}
    return {"rewards": values, "longest_prompt_tokens": longest, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m hpc_grpo.runtime.rank.data.inputs_probe ANSWER.json < request.json",
              file=sys.stderr)
        return 2
    request = json.load(sys.stdin)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    try:
        import datasets  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        answer: dict[str, Any] = {"skipped": f"{sys.executable} has no training stack "
                                             f"({exc.name or exc}): rewards and prompts not checked"}
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # user reward modules, as `python -m` run from here
        answer = probe(request)
    Path(args[0]).write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
