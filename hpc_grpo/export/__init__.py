"""After training, the launcher's side: `hpc-grpo export` (a checkpoint as a checked Hugging Face
folder: ``plan``, ``write``, ``card``) and `hpc-grpo eval` (``evaluate``), and what `status`
reads of both (``records``). The torch work runs in a child Python (``child``):
``hpc_grpo/runtime/posttrain/``.
"""
