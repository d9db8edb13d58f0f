"""The rank's generation engine (TRL's vLLM): its weights from the first push, the exact LoRA
push, the generation buffer saved with each checkpoint and the first completions recorded."""
