"""After training, on the machine that runs `hpc-grpo export` / `hpc-grpo eval`: the torch work.

The launcher (``hpc_grpo/export/``) plans, refuses and records; it never imports torch, so it
runs these modules in a child Python with a JSON request on stdin and reads a JSON answer
file back (runtime/child_answer.py); preflight/builtin_model.py runs ``runtime.models.build`` in
a child Python too, with arguments instead of a request.
"""
