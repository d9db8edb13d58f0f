"""`hpc-grpo export` and `hpc-grpo eval`: the commands after training, in the thin Click layer.

Kept beside cli.py (at its size limit) and added to its group there; like every command they
parse, call one ``api`` function and print. ``user_errors`` is cli.py's: a UserError becomes
one line and exit 2; an export that ran and failed (its check) exits 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import click


def posttrain_commands(user_errors: Callable[..., Any]) -> list[click.Command]:
    """The two commands, wrapped in the CLI's handling of UserError."""

    @click.command()
    @click.argument("run")
    @click.option("--step", type=int, help="Checkpoint step (default: the newest complete one).")
    @click.option("--best", "best", metavar="KEY",
                  help="The complete checkpoint whose step logged the highest value of this "
                  "metrics.jsonl key (reward_mean, rewards/NAME/mean or NAME); not with --step.")
    @click.option("--to", metavar="DIRECTORY",
                  help="Target folder, new or empty (default: RUN_DIR/export/step-N).")
    @click.option("--dtype", type=click.Choice(["bf16", "fp32"]),
                  help="Weights dtype (default: the training dtype, bf16 on GPUs, fp32 on CPU).")
    @click.option("--merge-lora/--adapter", "merge", default=True, show_default=True,
                  help="LoRA runs: merge the adapter into the base model, or export the adapter.")
    @click.option("--push", "push", metavar="ORG/NAME",
                  help="Then upload the checked folder to this Hugging Face hub repository "
                  "(created if new; token from HF_TOKEN or `hf auth login`, never written). An "
                  "export already at the target is pushed as it is.")
    @click.option("--private/--public", "private", default=None,
                  help="--push: visibility of a repository it creates (default: the hub's).")
    @click.option("--job/--here", "job", default=None,
                  help="Run the export as a one-node job of the run's back end (sbatch with the "
                  "memory it needs), or here. Default: a job where this Slurm login node has "
                  "less memory available than the export holds.")
    @user_errors
    def export(run: str, step: int | None, best: str | None, to: str | None, dtype: str | None,
               merge: bool, push: str | None, private: bool | None, job: bool | None) -> None:
        """Write a run's complete checkpoint as a checked Hugging Face model folder.

        Any layout the ranks save: ZeRO off, DeepSpeed ZeRO-1/2/3 shards (DeepSpeed's
        zero_to_fp32), LoRA (merged into the base with peft, or the adapter). The folder holds
        safetensors weights, config and generation config, the tokenizer with its chat template,
        a model card (run, model, step, reward history and curve) and is checked: its
        log-probabilities on fixed texts against the checkpoint's own weights rounded to the dtype
        written, within 1e-4 through transformers, and again through vLLM (0.25 on the mean: half
        precision arithmetic) where the machine that exports has vLLM and a GPU (a vLLM that
        cannot start there is said, not held against the folder); a merged LoRA's merge is
        checked in fp32 against the unmerged adapter (1e-3); what rounding alone does is reported.
        Refused, nothing written: an incomplete checkpoint, a non-empty target, too little disk.
        Written beside the target and renamed at the end; exit 1 when the check fails (the
        folder is removed). Recorded in RUN_DIR/exports.jsonl; `status` shows the newest.
        --push ORG/NAME then uploads the folder with huggingface_hub (RUN_DIR/pushes.jsonl); a
        refused push is one line, exit 1, and the export stays for the same command again.
        Where this Slurm login node has less memory available than the export holds (or with
        --job) the same command runs as a one-node job of the run's back end
        (RUN_DIR/export-jobs.jsonl); `status` follows it."""
        from hpc_grpo import api

        try:
            result = api.export(run, step=step, to=to, dtype=dtype, adapter=not merge,
                                announce=lambda line: click.echo(line, err=True), best=best,
                                push=push, private=private, job=job)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the hidden folder is already removed
            click.echo("export interrupted: nothing was written", err=True)
            sys.exit(130)
        if result.error:
            for line in api.check_lines(result.check):  # a failed check's figures, then why
                click.echo(f"check: {line}", err=True)
            click.echo(f"error: {result.error}", err=True)
            sys.exit(1)
        if result.job is not None:
            click.echo(f"export runs as job {result.job.job_id} ({result.job.reason}); "
                       f"`hpc-grpo status {run}` follows it; log: {result.job.log}")
            return
        for line in api.check_lines(result.check):
            click.echo(f"check: {line}", err=True)
        for note in result.notes:
            click.echo(f"note: {note}", err=True)
        click.echo(f"exported {result.plan.target}")
        if result.pushed is not None and result.pushed.error:
            click.echo(f"error: {result.pushed.error}", err=True)
            sys.exit(1)
        if result.pushed is not None:
            click.echo(f"pushed to {result.pushed.repo_id}: {result.pushed.url}")

    @click.command("eval")
    @click.argument("target")
    @click.option("--step", type=int, help="A run's checkpoint (default: its export of the highest "
                  "step, else its newest complete checkpoint).")
    @click.option("--best", "best", metavar="KEY",
                  help="The complete checkpoint whose step logged the highest value of this "
                  "metrics.jsonl key (reward_mean, rewards/NAME/mean or NAME); not with --step.")
    @click.option("--dataset", help="Default: the run's dataset.")
    @click.option("--split", help="Default: the run's split.")
    @click.option("--reward-funcs", "reward_funcs", multiple=True,
                  help="Default: the run's rewards, weights and keyword arguments (repeatable).")
    @click.option("--limit", type=click.IntRange(min=1), default=64, show_default=True,
                  help="Prompts evaluated (the dataset's first ones).")
    @click.option("--num-samples", type=click.IntRange(min=1), default=1, show_default=True,
                  help="Completions per prompt.")
    @click.option("--max-new-tokens", type=click.IntRange(min=1),
                  help="Default: the run's max_completion_length (TRL's 256 without a run).")
    @click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed.")
    @click.option("--engine", type=click.Choice(["auto", "vllm", "transformers"]), default="auto",
                  show_default=True, help="What generates: vLLM (on the run's planned TP) where "
                  "it can run here, else transformers; or the one named (vllm where it cannot "
                  "run is an error).")
    @click.option("--json", "as_json", is_flag=True, help="Print the result file's path and means as JSON.")
    @user_errors
    def eval_command(target: str, step: int | None, best: str | None, dataset: str | None, split: str | None,
                     reward_funcs: tuple[str, ...], limit: int, num_samples: int,
                     max_new_tokens: int | None, seed: int, engine: str, as_json: bool) -> None:
        """Mean reward (95% CI) of a run's model or a model folder on a dataset.

        TARGET: a run (its checkpoint --step N, else its export of the highest step, else its
        newest complete checkpoint) or a model folder. Dataset, rewards (weights, keyword arguments) and
        sampling default to the run's. Generated on this machine: through vLLM where it runs here
        (a GPU site; the run's planned tensor parallel size), else through transformers (the
        tiny model on CPU); --engine picks one. Written to RUN_DIR/eval/LABEL-TIME.json with the
        engine that generated; `status` shows the newest. A model folder of no run gets nothing
        written beside it: its results go to HPC_GRPO_HOME/evals/NAME-DIGEST/eval/. The child's
        temporary and cache files stay in the run's folders, as the ranks' do."""
        from hpc_grpo import api

        result = api.evaluate(target, step=step, dataset=dataset, split=split,
                              reward_funcs=reward_funcs, limit=limit, num_samples=num_samples,
                              max_new_tokens=max_new_tokens, seed=seed, best=best, engine=engine)
        if result.subject.picked:
            click.echo(result.subject.picked, err=True)
        click.echo(result.engine_line(), err=True)
        if as_json:
            click.echo(json.dumps({"path": str(result.path), "label": result.subject.label,
                                   "mean": result.reward.mean, "low": result.reward.low,
                                   "high": result.reward.high, "n": result.reward.n,
                                   "engine": result.engine}, indent=2))
            return
        click.echo(f"{result.subject.label}: mean reward {result.reward.text()}")
        for name, value in result.per_reward.items() if len(result.per_reward) > 1 else ():
            click.echo(f"  {name}: {value.text()}")
        click.echo(f"wrote {result.path}")

    return [export, eval_command]
