"""astuner's single-machine backbone: in-process transformers engine (and the GRPO trainer)."""
