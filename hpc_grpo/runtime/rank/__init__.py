"""One training rank, started by torchrun: ``train.py`` (its entry), the trainer's callbacks
(``callbacks.py``) and its hooks in their one order (``hooks.py``, ``context.py``), the ``check``
payload (``smoke.py``); by role: ``setup/`` (before the model loads), ``data/`` (prompts and
rewards), ``checkpoints/`` (save, resume, retention), ``generation/`` (the vLLM engine),
``observe/`` (what the rank reports), ``faults/`` (test-only). Never imports ``runtime.node``."""
