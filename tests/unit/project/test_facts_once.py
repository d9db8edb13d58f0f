"""Facts written once (#26): a second copy of one of these rules in the package fails here.

Each rule had drifted into several modules before: which back end a site has (12 branches in 6
files), the stop-signal set (4 builders), world size (5), the distributed backend (2), the
TP-divides-a-node check (4), scontrol runners (3) and run-directory JSON readers (2). The scan
reads source text, so the test is cheap and says where the copy is.
"""

from __future__ import annotations

import re

import pytest

from tests.paths import PACKAGE

SOURCES = {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in PACKAGE.rglob("*.py")}

# rule -> (pattern, the modules allowed to hold it, why there)
RULES: dict[str, tuple[str, set[str]]] = {
    # Which back end: backend_for picks it; the profile's own checks, the plan's one-node rule,
    # render's template, doctor's Slurm-only job and a run directory's record read it as data.
    "a branch on the scheduler": (
        r"scheduler\s*[!=]=\s*\"(local|slurm)\"|\"(local|slurm)\"\s*[!=]=\s*\w*scheduler",
        {"scheduler/backend.py", "config/site.py", "planner/job.py", "scheduler/render.py",
         "preflight/node_job.py", "rundir/view.py"}),
    "the stop-signal set": (r"ALWAYS_STOP\b", {"rundir/contract.py", "runtime/rank/train.py"}),
    "world size as a product": (
        r"\bnodes\)?\s*\*\s*[\w.(]*(procs|ppn|gpus_per_node)|\b(procs|ppn)\w*\)?\s*\*\s*[\w.(]*nodes\b",
        {"rundir/contract.py"}),
    "the distributed backend": (r"\"nccl\"\s+if\b|\"gloo\"\s+if\b", {"rundir/contract.py"}),
    "TP groups tile a node": (r"procs_per_node\s*%\s*tp\b|\bppn\s*%\s*tp\b",
                              {"rundir/placement.py", "planner/topology.py"}),
    # The runtime's one runner (scontrol, and the node task's sbatch and scancel when it
    # resubmits a job without a dead node: runtime/node/replace.py); the launcher's argv lists
    # go through scheduler/slurm.run_slurm.
    "a Slurm command runner": (r"\[\s*\"(scontrol|sbatch|scancel)\"|\(\s*\[\s*binary\b",
                               {"runtime/shared/scontrol.py", "scheduler/slurm.py"}),
    "a run-directory JSON-lines reader": (r"def (read_jsonl|tail_jsonl|last_jsonl)\b",
                                          {"rundir/__init__.py"}),
    # Export and push after training (#28): the --dtype flag of a written dtype, whether a
    # site's nodes reach the hub, and the export command line with its push flags.
    "the export's dtype flag map": (r"\"bfloat16\":\s*\"bf16\"|\"bf16\":\s*\"bfloat16\"",
                                    {"export/plan.py"}),
    "nodes reach the hub": (r"nodes_offline\s+is\s+False", {"config/site.py"}),
    "the push's --private/--public": (r"\"\s*--private\"\s+if\b", {"rundir/hub.py"}),
    "the export command line": (r"\"hpc_grpo\.cli\",\s*\"export\"", {"rundir/hub.py"}),
    # The launcher built on the run directory's typed view (#57). Which checkpoint is complete
    # (status, resume, export and the ranks had three versions of it, one drifted), the folder
    # name's pattern, free space of the nearest existing parent.
    "a checkpoint's completeness (trainer_state's step)": (
        r"\.get\(\"global_step\"|\[\"global_step\"\]", {"rundir/checkpoints.py"}),
    "the checkpoint-N pattern": (r"checkpoint-\(\\d\+\)", {"rundir/checkpoints.py"}),
    "free space": (r"disk_usage\(", {"rundir/checkpoints.py"}),
    # The child-Python protocol's launcher side: request on stdin, answer file (export, eval,
    # push, the check of rewards and prompts).
    "the child protocol's answer file": (r"answer\.json\"|answer_path\b", {"rundir/child_call.py"}),
    # ... and its child side: the request read, the answer written, an error as one line.
    "the child protocol's request": (r"json\.load\(sys\.stdin\)",
                                     {"runtime/child_answer.py", "runtime/rank/data/inputs_probe.py"}),
    # How a job asks Slurm for its allocation: one builder for the training script, doctor's
    # srun and side jobs.
    "the allocation request": (r"--gres=gpu|--gpus-per-node=|lmod/init",
                               {"scheduler/jobscript.py"}),
    # The stop-request file: written (request_stop) and read (StopRequest.parse) in one place.
    "the stop request's fields": (r"\.get\(\"signal\"\)", {"rundir/__init__.py"}),
    "a signal's name": (r"removeprefix\(\"SIG\"\)", {"rundir/contract.py"}),
    # (an export job's own ledger line names the back end it went to: rundir/ledgers.py)
    "the scheduler read from run.json": (r"\.get\(\"scheduler\"\)",
                                         {"rundir/view.py", "rundir/ledgers.py"}),
    # Where a child's libraries write (#27, #58): the ranks, the export, eval and push children
    # and the inputs probe had three versions, and export and eval none (torch inductor's cache
    # in /tmp, the datasets' in ~/.cache). The example-model builder keeps inductor's in its
    # own temporary folder.
    "where a child's caches go": (
        r"\"(TORCHINDUCTOR_CACHE_DIR|HF_DATASETS_CACHE|MPLCONFIGDIR|TRITON_CACHE_DIR)\"",
        {"rundir/workspace.py", "runtime/models/build.py"}),
    # (#58) Every command's rich console, which wraps only on a terminal (a piped wandb sync
    # command was split at 80 columns); and the memory Slurm gives the training job (doctor
    # reported the node's), beside the job's CPUs in the one allocation builder.
    "a rich console": (r"\bConsole\(", {"runs/terminal.py"}),
    "the job's memory from Slurm's defaults": (r"\"DefMemPer(CPU|Node|GPU)\"", {"scheduler/jobscript.py"}),
    # The step time learnt from a site's runs (#58): which runs are alike (the plan, the
    # registry and status all take it from the record) and the calibrated range, as data.
    # The CPUs this process may use: the node task's threads and site init --local's profile.
    "the usable CPUs": (r"sched_getaffinity\(", {"runtime/shared/host_memory.py"}),
    "a run's step-time shape": (r"\bStepShape\(", {"rundir/steps.py"}),
    # What a site's past runs measured for a plan: the plan's step time and its stop lead were
    # taken from two runs (a job-name prefix against the shape) by two readers, one reading
    # metrics as raw dicts; now one pass (runs/registry.py site_measurements) and one rule of a
    # run's steady step, slowest recent step and save (rundir/steps.py measure).
    "what a past run measured": (r"\bMeasuredStep\(|\bmax\(.*step_time", {"rundir/steps.py"}),
    "the calibrated range": (r"\bCALIBRATED\s*=", {"planner/speed/calibrated.py"}),
    # Which layouts may continue at another world size (#60): the launcher's resume refused
    # ZeRO and server mode by its own checks; now the launcher and the ranks read one rule.
    "which layouts change size": (r"RESHARDED_ZERO_STAGES\s*=|shards converted from|"
                                  r"is not resized yet", {"rundir/reshard.py"}),
    # (#58) Which paths are no file to read: a FIFO's open waits forever. The recipe, profile,
    # dataset and run.json readers ask rundir.checkpoints.special_file (beside folder_blocked).
    # (#59) The share of a node's memory a save's copies may hold: pinned blocks, an async
    # save's bytes on the ranks, and the plan's check of async_save.
    "a save's share of host memory": (r"HOST_FRACTION\s*=\s*0\.\d", {"rundir/contract.py"}),
    # (#60) The batch split kept at another world size: the launcher's resume --nodes applies
    # it, and a node task that started on fewer nodes (min_nodes) will need it without the launcher.
    "the batch split at another world size": (r"global_batch\s*%\s*\(", {"rundir/reshard.py"}),
    "a FIFO or device test": (r"S_ISFIFO|\.is_fifo\(|S_ISCHR", {"rundir/checkpoints.py"}),
    # (#60, min_nodes) An attempt's layout at the node count Slurm granted: one rule (record_at),
    # applied by the node task and the ranks to the count one module reads and hands on (the
    # doctor's probe job reads Slurm's count for its own report); and sbatch's MIN-MAX range.
    "an attempt's layout at the granted count": (
        r"\bdef record_at\b|\bHPC_GRPO_ATTEMPT_NODES\b|SLURM_JOB_NUM_NODES",
        {"rundir/reshard.py", "runtime/shared/attempt_nodes.py", "runtime/probe.py"}),
    "sbatch's node range": (r"f\"\{min_nodes\}-\{nodes\}\"", {"scheduler/render.py"}),
    # (#59) Each save's time: saves.jsonl is opened by its one writer (rank 0, through
    # ledgers.append_save) and its one tolerant reader, nowhere else.
    "the saves ledger's file": (r"/\s*(\w+\.)?SAVES_JSONL\b|\"saves\.jsonl\"",
                                {"rundir/ledgers.py", "rundir/contract.py"}),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_fact_lives_in_its_one_place(rule: str) -> None:
    pattern, allowed = RULES[rule]
    found = {name for name, text in SOURCES.items()
             if any(re.search(pattern, line) for line in text.splitlines()
                    if not line.lstrip().startswith("#"))}
    assert found - allowed == set(), f"{rule} written again in {sorted(found - allowed)}"
    assert found, f"the pattern for {rule} finds nothing: it no longer describes the code"


def test_the_scan_sees_a_second_copy() -> None:
    """The patterns match the copies they were written against (the test can fail)."""
    copies = {
        "a branch on the scheduler": 'if plan.site.scheduler == "local":',
        "world size as a product": "return self.spec.nodes * self.procs_per_node",
        "the distributed backend": 'dist_backend="nccl" if self.device == "cuda" else "gloo",',
        "TP groups tile a node": "if tp < 1 or ppn % tp:",
        "a Slurm command runner": 'subprocess.run(["sbatch", "--parsable", script], check=False)',
        "the export's dtype flag map": 'flag = {"bfloat16": "bf16", "float32": "fp32"}.get(d)',
        "nodes reach the hub": "return find_site(name).nodes_offline is False",
        "the push's --private/--public": 'private = "" if p is None else " --private" if p else ""',
        "the export command line": 'return [python, "-m", "hpc_grpo.cli", "export", run_dir]',
        "a checkpoint's completeness (trainer_state's step)":
            'return int(state.get("global_step", -1)) == step',
        "the checkpoint-N pattern": '_NAME = re.compile(r"^checkpoint-(\\d+)$")',
        "free space": "return shutil.disk_usage(probe).free",
        "the child protocol's answer file": 'answer_path = Path(tmp) / "answer.json"',
        "the child protocol's request": "answer = push(json.load(sys.stdin))",
        "the allocation request": 'options.append(f"--gres=gpu:{gpus}")',
        "the stop request's fields": 'if record.get("signal"):',
        "a signal's name": 'signum = signal.Signals["SIG" + name.upper().removeprefix("SIG")]',
        "the scheduler read from run.json": 'scheduler = str(record.get("scheduler") or "slurm")',
        "where a child's caches go": 'env["HF_DATASETS_CACHE"] = str(Path(tmp) / "datasets")',
        "a rich console": "console = Console(width=None if sys.stdout.isatty() else 200)",
        "the usable CPUs": "return len(os.sched_getaffinity(0))",
        "the job's memory from Slurm's defaults": 'per_cpu = int(record.get("DefMemPerCPU", 0))',
        "which layouts change size": 'raise UserError(f"{layout}: server mode is not resized yet")',
        "a FIFO or device test": "if path.is_fifo():",
        "what a past run measured":
            'step_s = max((float(r.get("step_time") or 0.0) for r in recent), default=0.0)',
        "the saves ledger's file": "rundir.append_jsonl(run_dir / contract.SAVES_JSONL, line)",
        "a save's share of host memory": "HOST_FRACTION = 0.5  # of the node's available memory",
        "the batch split at another world size":
            "if global_batch % (size * world) == 0 and generation % (size * world) == 0]",
        "an attempt's layout at the granted count": 'nodes = int(env["SLURM_JOB_NUM_NODES"])',
        "sbatch's node range": 'nodes=f"{min_nodes}-{nodes}" if min_nodes else nodes,',
    }
    for rule, line in copies.items():
        assert re.search(RULES[rule][0], line), rule
