"""The shape of two step-time terms the session-34 refit changed (terms.py): a decode step is
the longer of host and GPU work, and ZeRO-3's gathers count only where they exceed the compute
they hide behind, the weight sync's gather not among them."""

from __future__ import annotations

import pytest

from hpc_grpo.planner.speed import terms
from hpc_grpo.planner.speed.hardware_figures import CARDS

H100 = CARDS["H100"]
SEVEN_B, LAYERS = 7_600_000_000, 28


def test_a_decode_step_is_the_longer_of_host_and_gpu_work() -> None:
    one_token = terms.decode_s(H100, SEVEN_B, LAYERS, seqs=32, tokens=1, tp=1)
    weights = 2 * SEVEN_B / (H100.memory_tbs * 1e12 * terms.DECODE_BW_FRACTION)
    host = terms.DECODE_STEP_S["H100"] + 32 * terms.DECODE_SEQ_S
    assert one_token > weights > host  # 7B: reading the weights outlasts the host's work
    assert one_token < weights + host  # and the host's work is not added to it
    small = terms.decode_s(H100, 500_000_000, 24, seqs=32, tokens=1, tp=1)
    assert small == pytest.approx(host)  # 0.5B: the host sets the pace


def test_tp_all_reduces_grow_with_the_group() -> None:
    at = {tp: terms.decode_s(H100, SEVEN_B, LAYERS, seqs=64, tokens=1, tp=tp) for tp in (2, 4)}
    collectives = 2 * LAYERS * terms.TP_COLLECTIVE_S
    weights = {tp: 2 * SEVEN_B / tp / (H100.memory_tbs * 1e12 * terms.DECODE_BW_FRACTION)
               for tp in (2, 4)}
    assert at[2] > weights[2] + collectives * 0.99
    assert at[4] > weights[4] + 2 * collectives * 0.99


def _zero3(overlap_s: float, link_gbs: float = 150.0) -> float:
    return terms.exchange_s(3, SEVEN_B, SEVEN_B, 2, link_gbs, 1, 1, checkpointing=True,
                            layers=LAYERS, overlap_s=overlap_s)


def test_zero3_gathers_hide_behind_compute_and_only_their_excess_counts() -> None:
    per_pass = LAYERS * terms.ZERO3_FETCH_S_PER_LAYER  # inside a node: the fetch floor
    # everything that can hide is hidden: the gradients' reduce-scatter and the sync's gather left
    hidden = _zero3(overlap_s=1e9)
    scatter = hidden - per_pass
    assert scatter == pytest.approx(4 * SEVEN_B / 2 / (150.0 * 1e9))  # fp32, half to each rank
    exposed = _zero3(overlap_s=0.0)
    passes = 3 + 1  # forward, recomputed forward, backward; the old log-probabilities' forward
    assert exposed - hidden == pytest.approx(passes * per_pass)
    assert _zero3(overlap_s=0.5) - hidden == pytest.approx(passes * per_pass - 0.5)
    slow = _zero3(overlap_s=0.0, link_gbs=2.68) - _zero3(overlap_s=1e9, link_gbs=2.68)
    assert slow > passes * per_pass  # across a socket link the bandwidth, not the floor, sets the gathers
