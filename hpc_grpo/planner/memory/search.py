"""Which layouts the planner tries, cheapest first, and the first one that fits.

Layouts form one chain, ordered by cost: for each TP size from small to large, ZeRO-2 then
ZeRO-3; only at the largest TP, ZeRO-3 with optimizer offload, then with parameter offload too
(CPU Adam and parameter fetching cost far more step time than TP inside a node). Sleep mode is
tried off, then on, at each link. TP and offload never decrease along the chain, and whether a
layout fits only improves with GPU memory, so more memory never yields a larger TP or more
offload.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hpc_grpo.planner.memory.arch import ModelArch
from hpc_grpo.planner.memory.estimate import UTIL_MAX, UTIL_SHARE, Estimate, Layout, estimate
from hpc_grpo.planner.memory.request import PlanRequest


def valid_tps(arch: ModelArch, gpus_per_node: int) -> tuple[int, ...]:
    """Powers of two dividing the GPUs of a node, the attention heads and the KV heads."""
    sizes = []
    tp = 1
    while tp <= gpus_per_node:
        if gpus_per_node % tp == 0 and arch.num_attention_heads % tp == 0 \
                and arch.num_kv_heads % tp == 0:
            sizes.append(tp)
        tp *= 2
    return tuple(sizes)


def tp_divisibility(arch: ModelArch, gpus_per_node: int, tp: int) -> list[str]:
    """What a tensor_parallel_size fails to divide (empty when valid)."""
    checks = (("gpus_per_node", gpus_per_node), ("num_attention_heads", arch.num_attention_heads),
              ("num_kv_heads", arch.num_kv_heads))
    return [f"{name} {value}" for name, value in checks if value % tp]


def share_for(req: PlanRequest, tp: int) -> float:
    """The vLLM fraction allowed at this TP: half the GPU below the largest valid TP."""
    tps = valid_tps(req.arch, req.gpus_per_node)
    return UTIL_MAX if req.tensor_parallel_size or tp >= tps[-1] else UTIL_SHARE


@dataclass(frozen=True)
class Link:
    """One layout to try and the vLLM share allowed to it."""

    layout: Layout
    share: float


def chain(req: PlanRequest) -> tuple[Link, ...]:
    """Layouts in cost order, restricted to the user's overrides."""
    fixed_tp = req.tensor_parallel_size
    tps = (fixed_tp,) if fixed_tp else valid_tps(req.arch, req.gpus_per_node)
    if req.zero_stage is not None:
        zeros: tuple[int, ...] = (req.zero_stage,)
    else:
        zeros = (2,) if req.lora else (2, 3)
        if req.world_size == 1:
            zeros = (0, *zeros)  # one process: nothing to shard, so no DeepSpeed engine at all
    sleeps = (req.enable_sleep_mode,) if req.enable_sleep_mode is not None else (False, True)
    plain = [(tp, zero, False, False) for tp in tps for zero in zeros]
    offload = [(tps[-1], 3, True, False), (tps[-1], 3, True, True)] if not req.lora else []
    if req.offload_optimizer:
        plain = []
        offload = [(tp, zero, True, False) for tp in tps for zero in zeros if zero >= 2]
        offload += [(tps[-1], 3, True, True)] if 3 in zeros and not req.lora else []
    elif req.offload_optimizer is False:
        offload = []
    if req.zero_stage is not None:
        offload = [row for row in offload if row[1] == req.zero_stage]
    links = []
    for tp, zero, off_opt, off_params in plain + offload:
        for sleep in sleeps:
            links.append(Link(Layout(tp, zero, off_opt, off_params, sleep), share_for(req, tp)))
    return tuple(links)


def search(req: PlanRequest) -> tuple[Estimate | None, Estimate | None]:
    """(first fitting estimate or None, the last one tried: the leanest, for error messages)."""
    last = None
    for link in chain(req):
        last = estimate(req, link.layout, link.share)
        if last.fits:
            return last, last
    return None, last


def fits(req: PlanRequest) -> bool:
    """Whether any layout fits; sleep mode on never needs more memory, so only those are tried."""
    return any(estimate(req, link.layout, link.share).fits for link in chain(req)
               if link.layout.sleep or req.enable_sleep_mode is False)


def candidates(req: PlanRequest) -> tuple[Estimate, ...]:
    """Every layout of the chain with its estimate, fitting or not (the speed model ranks them),
    plus optimizer offload at the smaller TP sizes: the chain offloads only at the largest TP
    (the first-fit order), but a smaller TP generates faster, so the speed model is shown both.
    They go after the layouts without offload and before the largest TP's offload, in TP order,
    so that a near tie still keeps the cheaper layout (planner/speed/choose.py)."""
    links = list(chain(req))
    offloads = [link.layout for link in links if link.layout.offload_optimizer
                and not link.layout.offload_params and link.layout.zero == 3]
    if offloads and req.tensor_parallel_size is None:
        known = {link.layout for link in links}
        extra = [Link(layout, share_for(req, tp)) for tp in valid_tps(req.arch, req.gpus_per_node)
                 for top in offloads if tp < top.tp
                 if (layout := replace(top, tp=tp)) not in known]
        first = next(i for i, link in enumerate(links) if link.layout.offload_optimizer)
        links[first:first] = list(dict.fromkeys(extra))
    return tuple(estimate(req, link.layout, link.share) for link in links)
