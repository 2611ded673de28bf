"""Training: LoRA target discovery, ensemble fine-tuning (PMixED / SubMix)."""
