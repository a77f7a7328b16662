"""The embedded local provider: shipped models (converted once), batched in-process generation, LoRA adapters."""
