"""DeepSpeed on CPU ranks without the JIT build of an op training never calls.

Why: ``deepspeed.init_distributed`` on a CPU accelerator builds its shared-memory collective op
(``deepspeed_shm_comm``, C++ compiled with ninja into ~/.cache/torch_extensions) on first use.
DeepSpeed 0.19 calls it only from ``inference_all_reduce`` (deepspeed/comm/torch.py), which falls
back to the process group's all_reduce without it; ZeRO training never calls it. The build took
128 s of a CI run on this project's 2-core machine (2026-11-27, 16:01:54 to 16:04:02, under load)
and about a minute alone: a CPU run's first start (a newcomer's, every fresh CI clone) paid it.
DeepSpeed has no switch for it, so the op is marked incompatible in DeepSpeed's own table of
compatible ops before the process group starts; an unknown DeepSpeed layout leaves it alone.
"""

from __future__ import annotations

SHM_OP = "deepspeed_shm_comm"


def skip_inference_op() -> bool:
    """Mark the shared-memory op incompatible so ``build_shm_op`` returns None; True if done."""
    try:
        import deepspeed.ops  # here: the module imports without the training stack
    except ImportError:
        return False
    table = getattr(deepspeed.ops, "__compatible_ops__", None)  # probed once, then cached
    if not isinstance(table, dict) or SHM_OP not in table:
        return False
    table[SHM_OP] = False
    return True
