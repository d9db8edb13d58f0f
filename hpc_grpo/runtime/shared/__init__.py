"""What both the node task (``runtime/node``) and a rank (``runtime/rank``) use, so neither imports
the other: the setup-error verdict the ranks write and the node task reads, the signals between
them, where a staged model loads from, the vLLM server's address, and the node's own facts
(``scontrol``, its memory). Stdlib only, like the node task.
"""
