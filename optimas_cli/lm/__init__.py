"""The LM layer: every LLM call goes through litellm (API models, self-hosted servers, and the embedded
local provider), with a persistent call cache and a per-component usage ledger.

    from optimas_cli.lm.client import build_lm, LMClient
    from optimas_cli.lm import local_model_folder, register_local_model
"""
from __future__ import annotations

import os

# Importing litellm otherwise fetches its cost map from the network (unreachable offline, and slow).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# OpenMP threads that spin while waiting make torch 6-7x slower when other processes share the cores
# (measured: SmolLM2 decode on a busy 2-core machine); sleeping waiters cost nothing when it is idle.
# Effective only if torch is not imported yet.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from optimas_cli.lm.local.registry import local_model_folder, register_local_model  # noqa: E402

__all__ = ["local_model_folder", "register_local_model"]
