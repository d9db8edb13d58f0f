"""Bare TRL GRPO, no hpc-grpo in the training path: the baseline for benchmarks/bench_gpu.py.

Builds GRPOConfig and GRPOTrainer by hand with the settings given on the command line, times
each optimizer step and samples peak GPU memory. Run under torchrun for several GPUs. Only the
prompts and the reward function come from hpc-grpo's built-ins, so both sides train on the
same data. Writes a JSON summary to --out (rank 0).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=32, help="per-device train batch size")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--completion", type=int, default=256)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--sleep", action="store_true")
    parser.add_argument("--gpu-util", type=float, default=0.3)
    parser.add_argument("--mode", default="colocate", choices=["colocate", "server", "none"])
    parser.add_argument("--server-port", type=int, default=8000)
    parser.add_argument("--grpo-json", help="GRPOConfig kwargs (an hpc-grpo run's grpo_config.json); "
                        "replaces every setting above but --steps")
    args = parser.parse_args()

    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from hpc_grpo.runtime.rank.data.dataset import load_prompts
    from hpc_grpo.runtime.rank.data.rewards import resolve_reward
    from hpc_grpo.runtime.rank.observe.memory import GpuMemorySampler, physical_gpu

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    sampler = GpuMemorySampler(physical_gpu(local_rank))  # from train begin, as hpc-grpo's metrics
    vllm = {}
    if args.mode != "none":
        vllm = dict(use_vllm=True, vllm_mode=args.mode)
        if args.mode == "colocate":
            vllm.update(vllm_tensor_parallel_size=args.tp, vllm_gpu_memory_utilization=args.gpu_util,
                        vllm_enable_sleep_mode=args.sleep)
        else:
            vllm.update(vllm_server_host="127.0.0.1", vllm_server_port=args.server_port)
    if args.grpo_json:  # the very settings another run used, with its own output folder
        kwargs = json.loads(Path(args.grpo_json).read_text())
        kwargs.update(output_dir=str(Path(args.out).with_suffix(".ckpt")), max_steps=args.steps)
    else:
        kwargs = dict(
            output_dir=str(Path(args.out).with_suffix(".ckpt")), max_steps=args.steps,
            per_device_train_batch_size=args.batch, num_generations=args.generations,
            max_completion_length=args.completion, learning_rate=1e-5, logging_steps=1,
            save_strategy="no", report_to="none", bf16=True, seed=42, disable_tqdm=True, **vllm,
        )
    config = GRPOConfig(**kwargs)
    times: list[float] = []
    trl_times: list[float] = []  # TRL's own step_time: generation, forward and backward only

    class StepTimer(TrainerCallback):  # type: ignore[misc]
        """Step end to step end, the first from train begin: hpc-grpo's wall_step_time."""

        last = 0.0

        def on_train_begin(self, *a: object, **k: object) -> None:
            sampler.start()
            self.last = time.perf_counter()

        def on_step_end(self, *a: object, **k: object) -> None:
            now = time.perf_counter()
            times.append(now - self.last)
            self.last = now

        def on_log(self, *a: object, logs: dict[str, float] | None = None, **k: object) -> None:
            if logs and logs.get("step_time") is not None:
                trl_times.append(float(logs["step_time"]))

    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.model)
    started = time.perf_counter()
    trainer = GRPOTrainer(model=args.model, reward_funcs=[resolve_reward("builtin:length")], args=config,
                          train_dataset=load_prompts({"name": "builtin:digits"}),
                          processing_class=tokenizer, callbacks=[StepTimer()])
    build_s = time.perf_counter() - started
    trainer.train()
    sampler.stop()
    if int(os.environ.get("RANK", "0")) == 0:
        Path(args.out).write_text(json.dumps({
            "step_times": times, "trl_step_times": trl_times, "build_s": build_s,
            "peak_gpu_gib": sampler.peak_gib,
            "args": vars(args), "grpo_config": {k: v for k, v in kwargs.items()
                                                if isinstance(v, (str, int, float, bool, type(None)))}},
            indent=1))


if __name__ == "__main__":
    main()
