"""`hpc-grpo eval`: mean reward of a trained model on a dataset, with a 95% confidence interval.

What is evaluated: a run's checkpoint (``--step``), else its export of the highest step, else
its newest complete checkpoint; or any model folder. The dataset, rewards (with their keyword arguments and
weights) and generation settings default to the run's own (run.json), so the number is the
training reward on prompts of the user's choosing (``--dataset``/``--split``: a held-out split).
The generation runs on this machine in a child Python (runtime/posttrain/scoring.py), with
the engine ``--engine`` names: "auto" (vLLM where it can run here, on the run's planned tensor
parallel size, run.json's vllm.tensor_parallel_size, 1 for a folder of no run; else
transformers: the tiny model on a CPU site), "vllm" or "transformers". The record names the
engine that generated, and why not vLLM.

Statistics: each prompt's reward is the mean over its ``num_samples`` completions of the
weighted sum of the rewards (TRL's: a reward that skips a completion adds nothing); the
interval is the mean over prompts +- 1.96 standard errors (normal approximation, prompts
independent; samples of one prompt are not).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_grpo.errors import UserError
from hpc_grpo.export import best as best_of
from hpc_grpo.export import child, layout
from hpc_grpo.export.plan import base_model
from hpc_grpo.preflight.inputs import check_dataset
from hpc_grpo.rundir import ledgers, write_json_atomic
from hpc_grpo.rundir.checkpoints import run_checkpoints
from hpc_grpo.rundir.contract import EVAL_DIR, RUN_JSON, RunRecord, block_dict
from hpc_grpo.rundir.hub import hub_snapshot
from hpc_grpo.rundir.workspace import Workspace
from hpc_grpo.runs import registry, runfiles

MODULE = "hpc_grpo.runtime.posttrain.scoring"
Z95 = 1.959964
TRL_MAX_COMPLETION = 256  # GRPOConfig's default max_completion_length
MODEL_JSON = "model.json"  # in the workspace of a model folder of no run: the folder's path


@dataclass(frozen=True)
class Subject:
    """What is evaluated: a model folder (or a LoRA base plus an adapter) and its label."""

    model: str
    adapter: str
    label: str  # "step-4", "export step-4", a folder name
    run_dir: Path | None
    step: int | None
    picked: str = ""  # --best: which step was picked and its value
    layout: str = ""  # "zero": DeepSpeed's shards alone, read through zero_to_fp32


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        half = (self.high - self.low) / 2
        return f"{self.mean:.4g} +- {half:.3g} (95% CI {self.low:.4g} .. {self.high:.4g}, n={self.n})"


def interval(values: Sequence[float]) -> Interval:
    """Mean and normal-approximation 95% interval; one value has a zero-width interval."""
    n = len(values)
    if not n:
        raise ValueError("no values")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    half = Z95 * math.sqrt(var / n)
    return Interval(mean, mean - half, mean + half, n)


def per_prompt(rewards: Sequence[Sequence[float | None]], weights: Sequence[float],
               prompts: int, samples: int) -> list[float]:
    """Each prompt's mean over its samples of sum_i w_i r_i (None counts as 0, as TRL's nansum)."""
    weights = list(weights) or [1.0] * len(rewards)
    totals = [sum(w * (r[j] or 0.0) for w, r in zip(weights, rewards, strict=True))
              for j in range(prompts * samples)]
    return [sum(totals[p * samples:(p + 1) * samples]) / samples for p in range(prompts)]


def _checkpoint_subject(run_dir: Path, record: RunRecord, step: int | None) -> Subject:
    chosen = layout.pick(run_checkpoints(run_dir), step, record.run_id or run_dir.name)
    kind = layout.detect(layout.file_names(chosen.path))
    label = f"step-{chosen.step}"
    if kind == "lora":
        return Subject(base_model(record), str(chosen.path), label, run_dir, chosen.step)
    if not layout.weight_files(chosen.path):  # full-parameter ZeRO-3: DeepSpeed's files alone
        return Subject(str(chosen.path), "", label, run_dir, chosen.step, layout="zero")
    return Subject(str(chosen.path), "", label, run_dir, chosen.step)


def subject(target: str, step: int | None, find_run: Any,
            best: str | None = None) -> tuple[Subject, RunRecord | None]:
    """The model to evaluate and the run record its defaults come from (None for a bare folder);
    ``best``: a run's complete checkpoint with the highest value of that metrics key."""
    path = Path(target).expanduser().resolve()
    is_model = (path / "config.json").is_file() or (path / layout.ADAPTER_CONFIG).is_file()
    if is_model and not (path / RUN_JSON).exists():
        run_dir = next((p for p in path.parents[:3] if (p / RUN_JSON).is_file()), None)
        record = runfiles.read_run_record(run_dir, "evaluated") if run_dir else None
        if best:
            raise UserError("--best picks a run's checkpoint, not a model folder's", field="best",
                            hint="name the run instead of the folder")
        return Subject(str(path), "", path.name, run_dir, None), record  # an export of a run?
    run_dir = _run_or_say_what(target, path, find_run)
    run = runfiles.read_run_record(run_dir, "evaluated")
    picked = best_of.pick(run_dir, run.run_id or run_dir.name, step, best)
    if picked is not None:
        chosen = _checkpoint_subject(run_dir, run, picked.step)
        return dataclasses.replace(chosen, picked=picked.line()), run
    newest = ledgers.furthest_export(run_dir) if step is None else None
    if newest is not None:
        folder, label = str(Path(newest.path)), f"export step-{newest.step}"
        if newest.mode == "adapter":
            return Subject(base_model(run), folder, label, run_dir, newest.step), run
        return Subject(folder, "", label, run_dir, newest.step), run
    return _checkpoint_subject(run_dir, run, step), run


def _run_or_say_what(target: str, path: Path, find_run: Any) -> Path:
    """The run ``target`` names; a folder or file here that is neither a run nor a model folder
    is said to be so, not "no run" (issue #58: a model folder missing its config.json)."""
    try:
        return Path(find_run(target))
    except UserError:
        if not path.exists():
            raise
    what = "a folder" if path.is_dir() else "a file"
    raise UserError(f"{path} is {what} but neither a run directory (no {RUN_JSON}) nor a model "
                    f"folder (no config.json or {layout.ADAPTER_CONFIG})", field="target",
                    hint="name a run (its directory or id), a model folder, or a run's export")


def request(subj: Subject, record: RunRecord | None, dataset: str | None, split: str | None,
            reward_funcs: Sequence[str], limit: int, num_samples: int, seed: int,
            max_new_tokens: int | None = None, engine: str = "auto") -> dict[str, Any]:
    """The child's request: the run's dataset block, rewards and sampling, with the flags'
    changes. A bare folder has no run: --dataset and --reward-funcs are needed."""
    block = dict(block_dict(record.dataset)) if record else {}
    hf_home = record.model_load.hf_home if record else ""
    if block.get("commit") and hf_home:  # staged: its pinned snapshot folder, as the ranks read it
        block["name"] = hub_snapshot(hf_home, "dataset", str(block["name"]), str(block.pop("commit")))
    if dataset:
        block["name"] = dataset
        block.pop("commit", None)  # a staged commit belongs to the run's own dataset
    if split:
        block["split"] = split
    if not block.get("name"):
        raise UserError("no dataset to evaluate on", field="dataset", hint="pass --dataset")
    own = list(record.reward_funcs) if record else []
    specs = list(reward_funcs) or own
    if not specs:
        raise UserError("no reward functions to score with", field="reward_funcs",
                        hint="pass --reward-funcs (e.g. builtin:length)")
    same = not reward_funcs or list(reward_funcs) == own
    config = record.grpo_config if record else {}
    kwargs = {k: dict(v) for k, v in (record.reward_kwargs if record else {}).items() if k in specs}
    weights = list(record.reward_weights) if record and same else []
    return {"model": subj.model, "adapter": subj.adapter, "layout": subj.layout,
            "dataset": block, "reward_funcs": specs,
            "reward_kwargs": kwargs, "reward_weights": weights, "limit": limit,
            "num_samples": num_samples, "seed": seed,
            "max_new_tokens": max_new_tokens or int(config.get("max_completion_length")
                                                    or TRL_MAX_COMPLETION),
            "temperature": float(config.get("temperature", 1.0)),
            "top_p": float(config.get("top_p", 1.0)), "top_k": config.get("top_k") or 0,
            "min_p": float(config.get("min_p") or 0.0),
            "repetition_penalty": float(config.get("repetition_penalty", 1.0)),
            "engine": engine,
            "tensor_parallel": (record.vllm.tensor_parallel_size if record else 0) or 1}


@dataclass(frozen=True)
class Evaluated:
    subject: Subject
    reward: Interval
    per_reward: dict[str, Interval]
    path: Path
    example: dict[str, Any]
    engine: str = ""  # what generated: "vllm" or "transformers"
    engine_note: str = ""  # why not vLLM ("" when it generated)
    tensor_parallel: int = 1

    def engine_line(self) -> str:
        """"generated through vllm (TP 2)", "... transformers (vLLM not used: ...)"."""
        detail = f"TP {self.tensor_parallel}" if self.engine == "vllm" else self.engine_note
        return f"generated through {self.engine or '?'}" + (f" ({detail})" if detail else "")


EVALS = "evals"  # in hpc-grpo's home: one folder per model folder of no run


def workspace(subj: Subject, record: RunRecord | None) -> Workspace:
    """Where the child's temporary and cache files and the result go: the run's directory; for
    a model folder of no run, a folder of hpc-grpo's own per-user home named by the model
    folder (``evals/NAME-DIGEST``, its caches shared under ``evals/``). Never beside the model:
    it may be read-only, shared with others, a hub snapshot or about to be uploaded, and a
    ``FOLDER.eval/`` there is litter its owner did not ask for (issue #58)."""
    if subj.run_dir is not None:
        return Workspace.of_run(subj.run_dir, record.model_load.hf_home if record else "")
    model = Path(subj.model)
    digest = hashlib.sha256(str(model).encode()).hexdigest()[:8]
    return Workspace.of_run(registry.home_dir() / EVALS / f"{model.name}-{digest}")


def _where(subj: Subject, work: Workspace) -> Path:
    """The result's file: ``eval/LABEL-TIME.json`` in the workspace's folder."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", subj.label).strip("-")
    return work.folder / EVAL_DIR / f"{name}-{stamp}.json"


def evaluate(target: str, find_run: Any, step: int | None = None, dataset: str | None = None,
             split: str | None = None, reward_funcs: Sequence[str] = (), limit: int = 64,
             num_samples: int = 1, seed: int = 0, max_new_tokens: int | None = None,
             python: str = sys.executable, best: str | None = None,
             engine: str = "auto") -> Evaluated:
    if limit < 1 or num_samples < 1:
        raise UserError("--limit and --num-samples must be at least 1", field="num_samples")
    subj, record = subject(target, step, find_run, best)
    req = request(subj, record, dataset, split, reward_funcs, limit, num_samples, seed,
                  max_new_tokens, engine)
    if dataset:  # checked as submit checks it: a missing, empty, FIFO or non-UTF-8 file failed
        # only in the child, after it wrote its caches into the run (#58)
        block = req["dataset"]
        block["name"] = check_dataset(dataset, str(block.get("prompt_column") or "prompt"))
    work = workspace(subj, record)
    if subj.run_dir is None:  # which model this folder of hpc-grpo's is for
        work.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(work.folder / MODEL_JSON, {"model": subj.model})
    answer = child.run(python, MODULE, req, "eval", work)
    if not answer.get("ok"):
        raise UserError(f"eval of {subj.label} failed: {answer.get('error')}", field="eval")
    prompts, samples = int(answer["prompts"]), int(answer["num_samples"])
    scores = per_prompt(answer["rewards"], req["reward_weights"], prompts, samples)
    total = interval(scores)
    each = {name: interval(per_prompt([values], [], prompts, samples))
            for name, values in zip(answer["reward_names"], answer["rewards"], strict=True)}
    path = _where(subj, work)
    out = {"time": time.time(), "subject": dataclasses.asdict(subj) | {"run_dir": str(subj.run_dir or "")},
           "dataset": answer.get("dataset"), "reward_funcs": req["reward_funcs"],
           "reward_weights": req["reward_weights"], "prompts": prompts, "num_samples": samples,
           "seed": seed, "max_new_tokens": req["max_new_tokens"], "temperature": req["temperature"],
           "engine": str(answer.get("engine") or "?"), "engine_note": answer.get("engine_note") or "",
           "tensor_parallel": answer.get("tensor_parallel"), "reward": dataclasses.asdict(total),
           "per_reward": {k: dataclasses.asdict(v) for k, v in each.items()},
           "per_prompt": scores, "example": answer.get("example")}
    write_json_atomic(path, out)
    return Evaluated(subj, total, each, path, dict(answer.get("example") or {}), out["engine"],
                     out["engine_note"], int(answer.get("tensor_parallel") or 1))
