"""What the step-time model knows of the hardware: per card kind figures and link bandwidths.

Card figures are the vendors' datasheet numbers (dense bf16, no sparsity; HBM bandwidth):
H100 SXM 80 GB: 989 TFLOP/s, 3.35 TB/s; H200 SXM 141 GB: 989 TFLOP/s, 4.8 TB/s. A card is
known by its name when given (``PlanRequest.gpu_name``), else by the profile's memory: above
100 GiB an H200, else an H100. Anything else gets the H100 figures (an assumption the plan
states); the calibration measurements were all made on these two kinds.

Links (GB/s as NCCL's bus bandwidth counts it, so a collective of S bytes over n ranks takes
(n-1)/n·S/bw for an all-gather or reduce-scatter, twice that for an all-reduce):

* inside a node, unless ``PlanRequest.intra_node_gbs`` says otherwise: 150 GB/s, a conservative
  NVLink-class figure (NV18 H100/H200 boxes reach several hundred in nccl-tests);
* between nodes, unless ``PlanRequest.inter_node_gbs`` says otherwise: 25 GB/s, one 200 Gb/s
  InfiniBand port (docs/benchmarks.md, 2026-11-23 sixth session: "one 200 Gb/s InfiniBand link
  (25 GB/s)"). The GPU sandbox measured 2.68 GB/s over sockets (same section), which is what a
  site without RDMA may see: doctor's measurement should replace the assumption;
* host to GPU (optimizer and parameter offload): 25 GB/s, PCIe Gen5 x16 as achieved by pinned
  copies (an assumption; not measured here).
"""

from __future__ import annotations

from dataclasses import dataclass

from hpc_grpo.planner.memory.request import PlanRequest

INTRA_NODE_GBS = 150.0
INTER_NODE_GBS = 25.0
PCIE_GBS = 25.0


@dataclass(frozen=True)
class Card:
    kind: str
    memory_tbs: float  # HBM bandwidth, TB/s
    bf16_tflops: float  # dense bf16 peak, TFLOP/s
    assumed: bool = False  # not recognised: the H100 figures stand in


CARDS = {"H100": Card("H100", 3.35, 989.0), "H200": Card("H200", 4.8, 989.0)}


def card(req: PlanRequest) -> Card:
    """The card's figures: by name when known, else by memory size, else the H100's (assumed)."""
    name = req.gpu_name.upper()
    for kind, figures in CARDS.items():
        if kind in name:
            return figures
    if name:
        h100 = CARDS["H100"]
        return Card(h100.kind, h100.memory_tbs, h100.bf16_tflops, assumed=True)
    return CARDS["H200"] if req.gpu_memory_gib > 100 else CARDS["H100"]


@dataclass(frozen=True)
class Links:
    intra_gbs: float
    inter_gbs: float
    source: str

    def data_parallel(self, nodes: int) -> float:
        """The slowest link a data-parallel collective crosses."""
        return self.inter_gbs if nodes > 1 else self.intra_gbs


def links(req: PlanRequest) -> Links:
    """The request's link bandwidths, or the assumed ones, and where they came from."""
    intra = req.intra_node_gbs or INTRA_NODE_GBS
    inter = req.inter_node_gbs or INTER_NODE_GBS
    given = req.intra_node_gbs is not None or req.inter_node_gbs is not None
    source = req.link_source or ("given" if given else "assumed")
    if given and (req.intra_node_gbs is None or req.inter_node_gbs is None):
        source += "; the other assumed"
    return Links(intra, inter, source)
