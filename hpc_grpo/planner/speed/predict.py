"""A layout's predicted step time: the sum of the terms of ``terms.py`` for one optimizer step.

One optimizer step of a rank trains per_device_train_batch_size x gradient_accumulation_steps
sequences of prompt + completion tokens; it generates them in gradient_accumulation_steps /
steps_per_generation rounds, each round max_num_seqs sequences per engine (colocated: its TP
group's; server mode: the whole job's, split over the server's GPUs). tokens/s counts the
trained prompt + completion tokens of all ranks, the same throughput in both modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from hpc_grpo.planner.memory.estimate import Layout, max_num_seqs, sequence_length
from hpc_grpo.planner.memory.request import PlanRequest
from hpc_grpo.planner.speed import terms
from hpc_grpo.planner.speed.hardware_figures import card, links


@dataclass(frozen=True)
class StepTime:
    """Predicted seconds per optimizer step, by term, and the job's trained tokens per second."""

    seconds: float
    tokens_per_s: float
    terms: tuple[tuple[str, float], ...]

    def to_dict(self) -> dict[str, object]:
        return {"s_per_step": round(self.seconds, 3), "tokens_per_s": round(self.tokens_per_s),
                "terms_s": {name: round(value, 3) for name, value in self.terms}}


def _rounds(req: PlanRequest) -> float:
    return req.gradient_accumulation_steps / req.generation_steps


def _tokens(req: PlanRequest) -> int:
    return req.per_device_train_batch_size * req.gradient_accumulation_steps * sequence_length(req)


def _training_terms(req: PlanRequest, zero: int, offload: tuple[bool, bool],
                    world: int) -> list[tuple[str, float]]:
    """Compute, data-parallel exchange and optimizer step of one trainer rank."""
    gpu, arch = card(req), req.arch
    params, trainable = arch.num_params, req.trainable_params
    flops = terms.train_flops(params, _tokens(req), req.gradient_checkpointing, req.lora)
    compute = terms.compute_s(gpu, flops, arch.hidden_size)
    link = links(req).data_parallel(req.nodes)
    micro = req.gradient_accumulation_steps
    exchange = terms.exchange_s(zero, params, trainable, world, link, micro, ceil(_rounds(req)),
                                checkpointing=req.gradient_checkpointing, layers=arch.num_layers,
                                overlap_s=compute)
    shard = trainable / (world if zero >= 2 else 1)
    optimizer = (terms.offload_s(shard, offload[1], params, micro) if offload[0]
                 else terms.adam_gpu_s(gpu, shard))
    return [("training compute", compute),
            ("data-parallel exchange", exchange), ("optimizer step", optimizer)]


def _total(req: PlanRequest, items: list[tuple[str, float]], world: int) -> StepTime:
    items = [*items, ("rewards, logging", terms.STEP_S)]
    seconds = sum(value for _, value in items)
    return StepTime(seconds, world * _tokens(req) / seconds, tuple(items))


def predict(req: PlanRequest, layout: Layout, util: float) -> StepTime:
    """A colocated layout: every rank generates with its TP group's engine, then trains."""
    gpu, arch, rounds = card(req), req.arch, _rounds(req)
    decode = terms.decode_s(gpu, arch.num_params, arch.num_layers, max_num_seqs(req, layout.tp),
                            sequence_length(req) - req.prompt_length, layout.tp)
    items = [("generation", rounds * decode),
             ("weight sync", rounds * terms.sync_s(arch.num_params, layout.tp))]
    if layout.sleep:
        items.append(("sleep and wake", rounds * terms.sleep_s(util * req.gpu_memory_gib)))
    offload = (layout.offload_optimizer, layout.offload_params)
    items += _training_terms(req, layout.zero, offload, req.world_size)
    return _total(req, items, req.world_size)


def predict_server(req: PlanRequest, server_gpus: int, zero: int,
                   offload_optimizer: bool = False, *, across_nodes: bool | None = None) -> StepTime:
    """Server mode: ``req`` describes the trainers (nodes and gpus_per_node: those that train);
    ``server_gpus`` engines of `vllm serve` on the last node generate for all of them.
    ``across_nodes``: whether the weight push crosses the link between nodes (the server on
    another node than trainer rank 0); unset, it does when the trainers span several nodes."""
    gpu, arch, rounds = card(req), req.arch, _rounds(req)
    seqs = ceil(req.per_device_train_batch_size * req.generation_steps * req.world_size
                / server_gpus)
    decode = terms.decode_s(gpu, arch.num_params, arch.num_layers, seqs,
                            sequence_length(req) - req.prompt_length, 1)
    link = links(req)
    crosses = req.nodes > 1 if across_nodes is None else across_nodes
    push_link = link.inter_gbs if crosses else link.intra_gbs
    items = [("generation", rounds * decode),
             ("weight push to the server", rounds * terms.server_push_s(arch.num_params, push_link))]
    items += _training_terms(req, zero, (offload_optimizer, False), req.world_size)
    return _total(req, items, req.world_size)
