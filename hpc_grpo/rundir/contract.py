"""The launcher/runtime contract: what ``run.json`` and ``state.json`` hold, typed, in one place.

Standard library only, so both sides import it: the launcher builds a ``RunRecord`` from its
plan and writes it; the node task and every rank read the same record back. Defaults, file
names, the stop signals and the port spacing live here and nowhere else (the rank-row rule in
rundir/placement.py), so the two sides cannot drift apart. See docs/run-directory.md for the files themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hpc_grpo.rundir.hardware import HardwareBlock  # run.json's "hardware" block
from hpc_grpo.rundir.hub import HubBlock  # run.json's "hub" block (push_to_hub)
from hpc_grpo.rundir.placement import RankRow  # run.json's "ranks" rows

SCHEMA = 1  # run.json's version; a reader refuses a newer one in one line

# Run-directory file names.
RUN_JSON = "run.json"
STATE_JSON = "state.json"
METRICS_JSONL = "metrics.jsonl"
RANKS_JSON = "ranks.json"
SUMMARY_JSON = "summary.json"
REWARD_CURVE = "reward_curve.png"
STOP_REQUEST = "stop-request"
CHECKPOINTS = "checkpoints"
# The share of the memory a job has on a node that a save's copies may hold at once: torch.save's
# pinned blocks (runtime/rank/checkpoints/pinned_save.py) and a background write's bytes
# (background_save.py) on the ranks, and the plan's check of async_save (planner/save_time.py).
CHECKPOINT_HOST_FRACTION = 0.5
GENERATION_BUFFER = "generation-buffer"  # a mid-block checkpoint's buffered completions, per rank
DEEPSPEED_JSON = "deepspeed.json"
GRPO_CONFIG_JSON = "grpo_config.json"
JOBS_JSONL = "jobs.jsonl"
JOB_ERROR_JSON = "job-error.json"  # the job script: a site module that did not load
RESTARTS_JSONL = "restarts.jsonl"  # one line per resumed attempt: cause, steps lost, resume step
RETRIES_JSONL = "retries.jsonl"  # one line per automatic requeue after a crash
STARTUP_JSONL = "startup.jsonl"  # one line per attempt: its time to the first step, by part
SAVES_JSONL = "saves.jsonl"  # one line per completed checkpoint save: step, seconds (rank 0)
# The rank-0 node task's cause of a signalled stop, written the moment the signal arrives (the
# task may be killed before it can put it in state.json): {"attempt", "cause", "signal", "facts"}.
STOP_CAUSE_JSON = "stop-cause.json"
TRAINERS_ENDED_JSON = "trainers-ended.json"  # node 0 to a server node past `nodes`: attempt over
SETUP_ERRORS = "setup-errors"  # rank-<N>.json: what each rank raised before the first step
HEARTBEATS = "heartbeats"  # rank-<N>.json: each rank's last progress (runtime/rank/observe/heartbeat.py)
LOGS = "logs"
RANK_LOG = "rank-{rank}.log"  # in LOGS: stdout+stderr of global rank N; rank="*" globs them all
VLLM_SERVER_LOG = "vllm-server.log"  # in LOGS: `vllm serve` in server mode
LOCAL_NODE_LOG = "node-local.log"  # in LOGS: a local run's node task (Slurm's are in SUBMITIT)
CHECK = "check"  # payload "check": rank-<N>.json, what each rank saw
GENERATIONS = "generations"  # rank-<N>.jsonl: hashes of the first colocated generate() results
SUBMITIT = "submitit"
JOB_SBATCH = "job.sbatch"  # launcher only: the exact script given to sbatch
PLAN_TXT = "plan.txt"  # launcher only: what render printed after the script
SPEC_JSON = "spec.json"  # launcher only: the job spec and site the plan came from (resume plans again)
ATTEMPTS = "attempts"  # launcher only: job.sbatch, run.json, plan.txt of the jobs a resume replaced
# Written into checkpoints/checkpoint-<step>/ once every rank saved: only these are resumed from.
CHECKPOINT_MARKER = "hpc_grpo_complete.json"
# After training (`hpc-grpo export` / `eval`, launcher only): exported model folders under
# export/step-<N>[-adapter]/, one line per finished export, and one JSON file per evaluation.
EXPORT_DIR = "export"
EXPORTS_JSONL = "exports.jsonl"
EVAL_DIR = "eval"
PUSHES_JSONL = "pushes.jsonl"  # one line per export uploaded to the hub (`export --push`)
EXPORT_JOBS_JSONL = "export-jobs.jsonl"  # one line per `export` run as a job (export/side_job.py)

# Each job owns PORTS_PER_JOB consecutive ports from MASTER_PORT: torchrun's rendezvous, the vLLM
# server and its weight-sync group.
VLLM_SERVER_PORT_OFFSET = 1
WEIGHT_SYNC_PORT_OFFSET = 2
PORTS_PER_JOB = WEIGHT_SYNC_PORT_OFFSET + 1


def port_slots(port_low: int, port_high: int) -> int:
    """How many jobs' ports fit a site's range (at least one: a profile holds PORTS_PER_JOB)."""
    return max(1, (port_high - port_low + 1) // PORTS_PER_JOB)


def job_port(port_low: int, port_high: int, job_id: int) -> int:
    """The job's first port (MASTER_PORT), as the sbatch script derives it from SLURM_JOB_ID:
    the range is cut into slots of PORTS_PER_JOB and the job id picks one."""
    return port_low + (job_id % port_slots(port_low, port_high)) * PORTS_PER_JOB

# Signals that always mean "checkpoint and stop": USR2 is submitit's and the profiles' default
# requeue signal, TERM is what Slurm sends before a kill. A profile may add its own (USR1).
DEFAULT_REQUEUE_SIGNAL = "USR2"
REQUEUE_SIGNALS = ("USR1", DEFAULT_REQUEUE_SIGNAL, "TERM")  # what a profile may name
ALWAYS_STOP = (DEFAULT_REQUEUE_SIGNAL, "TERM")

DEFAULT_SEED = 42
DEFAULT_MAX_REQUEUES = 3
DEFAULT_SIGNAL_LEAD_S = 120
DEFAULT_VLLM_GPU_MEMORY_UTILIZATION = 0.3  # TRL's own default
DEFAULT_PORT_RANGE = (20000, 29999)  # a site's rendezvous/vLLM ports, PORTS_PER_JOB a job
DEFAULT_SAVE_TOTAL_LIMIT = 3  # kept when the recipe does not say (the planner sizes disks for it)
DEFAULT_SAVE_STEPS = 50  # saved every N steps where the recipe does not say (the plan's save time)
# The hang watchdog (runtime/node/watchdog.py): the start-up allowance (to an attempt's first step),
# then the least wait for progress and the factor on the slowest step. A collective timeout of
# TRL's default (30 min) where nothing is planned.
DEFAULT_WATCHDOG_STARTUP_S, DEFAULT_WATCHDOG_MIN_S, DEFAULT_WATCHDOG_FACTOR = 1800, 300, 3.0
DEFAULT_COLLECTIVE_TIMEOUT_S = 1800

PHASES = ("starting", "training", "interrupted", "done", "failed")
CLEAN_END = ("done", "interrupted")
# state.json stop_cause when every rank raised the same error before the first step: a bad
# value or input, which a retry would only repeat.
CONFIGURATION_ERROR = "configuration error"
# state.json stop_cause when the ranks stopped for a stop-request file that no signal wrote.
STOP_REQUESTED = "stop request"
# state.json stop_cause when the watchdog ended an attempt that made no progress (never a
# configuration error: it is retried like a crash).
STALLED = "stalled"
NODE_FAILURE = "node failure"  # stop_cause of a lost node; status: Slurm requeues it (jobstate.py)
CANCELLED = "cancelled"  # stop_cause of a scancel, jobs.jsonl's event of a cancel: CANCELLED

# metrics.jsonl keys: the mean and the largest absolute difference, over the step's sampled
# completion tokens, between vLLM's log-probability of each token and the trainer's (issue #15:
# evidence that the engine generates with the weights just trained; hpc_grpo/runs/drift.py).
LOGP_DIFF_MEAN = "vllm_logp_diff_mean"
LOGP_DIFF_MAX = "vllm_logp_diff_max"


def dist_backend(device: str) -> str:
    """torch.distributed's backend for a device: NCCL on GPUs, gloo on CPUs (the one rule)."""
    return "nccl" if device == "cuda" else "gloo"


def world_size(nodes: int, procs_per_node: int) -> int:
    """Ranks in a run: node-major, the same number on every node (the one rule)."""
    return nodes * procs_per_node


class ContractError(ValueError):
    """A run directory this version cannot read; the message is one line saying what to do."""


def signal_name(name: str) -> str:
    """A signal as the run directory and Slurm name it: upper case, no SIG prefix (``usr2``,
    ``SIGUSR2`` and ``USR2`` are all ``USR2``)."""
    return name.upper().removeprefix("SIG")


def recorded_stop_signals(requeue_signal: str) -> tuple[str, ...]:
    """What run.json's stop block records for a profile: its requeue signal and TERM, sorted.
    The run stops on ``StopBlock.every`` of it, which adds USR2 whatever the profile says."""
    return tuple(sorted({signal_name(requeue_signal), "TERM"}))


@dataclass(frozen=True)
class DatasetBlock:
    name: str
    prompt_column: str = "prompt"
    split: str = "train"
    max_prompt_length: int | None = None
    config: str = ""  # a hub dataset's configuration name (TRL's dataset_config)
    solution_column: str = ""  # the reference answer accuracy rewards compare with ("" none)
    system_prompt: str = ""  # set: prompts become [system, user] chats for the chat template
    commit: str = ""  # a hub dataset staged in model_load.hf_home: the commit pinned ("" none)


@dataclass(frozen=True)
class ModelBlock:
    """How the ranks load the model: TRL/open-r1 ``ModelConfig`` keys, and where it is staged."""

    revision: str = ""  # branch, tag or commit asked for ("" the default branch)
    commit: str = ""  # the commit hash staging resolved and pinned ("" not staged)
    dtype: str = ""  # the dtype the ranks load in (rundir/precision.py as_loaded); "" TRL's fp32
    attn_implementation: str = ""
    trust_remote_code: bool = False
    hf_home: str = ""  # the shared Hugging Face cache the ranks read ("" the node's default)
    offline: bool = False  # the ranks run with HF_HUB_OFFLINE=1 / HF_DATASETS_OFFLINE=1
    pure_bf16: bool = False  # bf16 weights and Adam states, asked for (rundir/precision.py)


@dataclass(frozen=True)
class PeftBlock:
    """LoRA (QLoRA with ``load_in_4bit``): TRL's ModelConfig names and defaults."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ()  # () lets peft pick the architecture's default
    load_in_4bit: bool = False


@dataclass(frozen=True)
class ServerBlock:
    """Server mode: the node and GPUs running ``vllm serve``, and the GPUs that train."""

    node: int
    gpus: tuple[int, ...]
    trainer_gpus: tuple[int, ...]


@dataclass(frozen=True)
class VllmBlock:
    enabled: bool = False
    mode: str = "colocate"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = DEFAULT_VLLM_GPU_MEMORY_UTILIZATION
    enable_sleep_mode: bool = False
    max_model_length: int | None = None
    server: ServerBlock | None = None

    @property
    def server_mode(self) -> bool:
        return self.enabled and self.mode == "server" and self.server is not None


@dataclass(frozen=True)
class DeepSpeedBlock:
    zero_stage: int
    offload_optimizer: bool = False
    overlap_comm: bool = True
    contiguous_gradients: bool = True


@dataclass(frozen=True)
class StopBlock:
    signals: tuple[str, ...] = ALWAYS_STOP

    def every(self) -> tuple[str, ...]:
        """Every signal name the node task and the ranks turn into "checkpoint and stop":
        ALWAYS_STOP first, then what the profile added. The one place the set is built."""
        return tuple(dict.fromkeys(signal_name(s) for s in (*ALWAYS_STOP, *self.signals)))

    def forwarded_by_batch_shell(self) -> tuple[str, ...]:
        """The signals the batch shell passes on to the node tasks: all but TERM, which Slurm
        sends to the steps itself when it cancels or requeues the job."""
        return tuple(s for s in self.every() if s != "TERM")


@dataclass(frozen=True)
class WatchdogBlock:
    """The hang watchdog's bounds (site profile keys ``watchdog_startup_s``/``watchdog_min_s``)."""

    startup_s: float = DEFAULT_WATCHDOG_STARTUP_S
    min_s: float = DEFAULT_WATCHDOG_MIN_S
    factor: float = DEFAULT_WATCHDOG_FACTOR


@dataclass(frozen=True)
class RunRecord:
    """``run.json``: everything the node tasks and the ranks need, and nothing they re-decide."""

    run_id: str
    run_dir: str
    model: str
    dataset: DatasetBlock
    nodes: int
    procs_per_node: int
    ranks: tuple[RankRow, ...]
    # The fewest nodes an attempt may start on (0: off); Slurm is asked for min_nodes-nodes and
    # each attempt applies rundir/reshard.record_at to the count it got (issue #60).
    min_nodes: int = 0
    payload: str = "train"
    reward_funcs: tuple[str, ...] = ()
    reward_weights: tuple[float, ...] = ()  # () every reward weighs 1 (TRL's default)
    # Keyword arguments bound to each reward, keyed by its entry in reward_funcs.
    reward_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    model_load: ModelBlock = ModelBlock()
    peft: PeftBlock | None = None  # None: full fine-tuning
    seed: int = DEFAULT_SEED
    device: str = "cpu"
    dist_backend: str = ""
    grpo_config: Mapping[str, Any] = field(default_factory=dict)  # a plain dict: picklable
    vllm: VllmBlock = VllmBlock()
    deepspeed: DeepSpeedBlock | None = None
    stop: StopBlock = StopBlock()
    site: str = ""
    scheduler: str = "slurm"
    max_requeues: int = DEFAULT_MAX_REQUEUES
    signal_lead_s: int = DEFAULT_SIGNAL_LEAD_S
    time_min: int | None = None
    memory_plan: Mapping[str, Any] | None = None
    watchdog: WatchdogBlock = WatchdogBlock()
    collective_timeout_s: int = DEFAULT_COLLECTIVE_TIMEOUT_S  # torch.distributed (planner/timeouts.py)
    checkpoint_bytes: int = 0  # the plan's size of one checkpoint; 0: not estimated
    async_save: bool = False  # periodic saves written in the background (background_save.py)
    predicted_step_s: float | None = None  # the plan's predicted s/step (planner/step_source.py)
    # the plan's predicted seconds of one save (planner/save_time.py), the write bandwidth a node
    # it assumed and where that came from: "measured", "declared" or "assumed"; None, None, "" in
    # a plan without a checkpoint size (an unknown architecture) and in a run.json before them
    predicted_save_s: float | None = None
    save_write_gbs: float | None = None
    save_write_source: str = ""
    hardware: HardwareBlock = HardwareBlock()  # what the plan assumed of each node
    hub: HubBlock | None = None  # push_to_hub: the export and push after training (no key: None)
    schema: int = SCHEMA

    @property
    def world_size(self) -> int:
        return world_size(self.nodes, self.procs_per_node)

    @property
    def backend(self) -> str:
        """torch.distributed backend: the record's, else the device's (``dist_backend``)."""
        return self.dist_backend or dist_backend(self.device)

    @property
    def max_steps(self) -> int:
        return int(self.grpo_config.get("max_steps", -1))

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in block_dict(self).items() if k != "hub" or v is not None}
        out["world_size"] = self.world_size  # kept for readers of the file (and older runtimes)
        return out

    def with_run_dir(self, run_dir: str) -> RunRecord:
        return dataclasses.replace(self, run_dir=run_dir)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunRecord:
        """Read a run.json mapping; a newer schema or a missing field is one clear line."""
        schema = data.get("schema")
        if schema != SCHEMA:
            newer = isinstance(schema, int) and schema > SCHEMA
            raise ContractError(
                f"run.json has schema {schema!r}; this hpc-grpo reads schema {SCHEMA}"
                + (": install the hpc-grpo version that wrote it on the nodes" if newer else ""))
        try:
            vllm = dict(data.get("vllm") or {})
            server = vllm.pop("server", None)
            ds = data.get("deepspeed")
            peft = data.get("peft")
            nodes, ppn = int(data["nodes"]), int(data["procs_per_node"])
            if "world_size" in data and int(data["world_size"]) != world_size(nodes, ppn):
                raise ContractError(f"run.json world_size {data['world_size']} is not nodes {nodes}"
                                    f" x procs_per_node {ppn}")
            return cls(
                run_id=str(data["run_id"]), run_dir=str(data["run_dir"]), model=str(data["model"]),
                dataset=DatasetBlock(**data["dataset"]), nodes=nodes, procs_per_node=ppn,
                ranks=tuple(RankRow(**row) for row in data.get("ranks") or ()),
                min_nodes=int(data.get("min_nodes") or 0),
                payload=str(data.get("payload", "train")),
                reward_funcs=tuple(data.get("reward_funcs") or ()),
                reward_weights=tuple(float(w) for w in data.get("reward_weights") or ()),
                reward_kwargs={str(k): dict(v) for k, v in (data.get("reward_kwargs") or {}).items()},
                model_load=ModelBlock(**(data.get("model_load") or {})),
                peft=PeftBlock(**{**peft, "target_modules": tuple(peft.get("target_modules") or ())})
                if peft else None,
                seed=int(data.get("seed", DEFAULT_SEED)), device=str(data.get("device", "cpu")),
                dist_backend=str(data.get("dist_backend") or ""),
                grpo_config=dict(data.get("grpo_config") or {}),
                vllm=VllmBlock(**vllm, server=ServerBlock(
                    node=int(server["node"]), gpus=tuple(server["gpus"]),
                    trainer_gpus=tuple(server["trainer_gpus"])) if server else None),
                deepspeed=DeepSpeedBlock(**ds) if ds else None,
                stop=StopBlock(tuple((data.get("stop") or {}).get("signals") or ALWAYS_STOP)),
                site=str(data.get("site", "")), scheduler=str(data.get("scheduler", "slurm")),
                max_requeues=int(data.get("max_requeues", DEFAULT_MAX_REQUEUES)),
                signal_lead_s=int(data.get("signal_lead_s", DEFAULT_SIGNAL_LEAD_S)),
                time_min=data.get("time_min"), memory_plan=data.get("memory_plan"),
                watchdog=WatchdogBlock(**(data.get("watchdog") or {})),
                collective_timeout_s=int(data.get("collective_timeout_s", DEFAULT_COLLECTIVE_TIMEOUT_S)),
                checkpoint_bytes=int(data.get("checkpoint_bytes") or 0),
                async_save=bool(data.get("async_save", False)),
                predicted_step_s=float(data["predicted_step_s"]) if data.get("predicted_step_s") else None,
                predicted_save_s=float(data["predicted_save_s"]) if data.get("predicted_save_s") else None,
                save_write_gbs=float(data["save_write_gbs"]) if data.get("save_write_gbs") else None,
                save_write_source=str(data.get("save_write_source") or ""),
                hardware=HardwareBlock(**(data.get("hardware") or {})),
                hub=HubBlock(**data["hub"]) if data.get("hub") else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ContractError):
                raise
            raise ContractError(f"run.json is not a schema-{SCHEMA} run record: {exc!r}") from None


def block_dict(block: Any) -> Any:
    """A record or one of its blocks (a frozen dataclass, or None) as run.json holds it."""
    return None if block is None else _plain(dataclasses.asdict(block))


def _plain(value: Any) -> Any:
    """JSON-ready: tuples to lists, mappings to dicts."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value
