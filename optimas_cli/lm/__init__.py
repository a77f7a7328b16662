"""The LM layer: every LLM call goes through litellm (API models, self-hosted servers, and the embedded
local provider), with a persistent call cache and a per-component usage ledger.

    from optimas_cli.lm.client import build_lm, LMClient
    from optimas_cli.lm import local_model_folder, register_local_model
"""
from __future__ import annotations

from optimas_cli.lm.local.registry import local_model_folder, register_local_model

__all__ = ["local_model_folder", "register_local_model"]
