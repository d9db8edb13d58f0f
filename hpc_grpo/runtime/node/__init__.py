"""The per-node task (``task.NodeTask``) and what it decides: retries and the vLLM server."""
